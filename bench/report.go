package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// A report is everything one run of the harness measured.
type report struct {
	Meta    meta         `json:"meta"`
	Ceiling *ceiling     `json:"redis_benchmark,omitempty"`
	Cells   []cellReport `json:"cells"`
	Goals   []goalResult `json:"goals,omitempty"`
	order   []string     // contenders in display order
}

// meta says where and how the numbers were taken.
type meta struct {
	Date         string `json:"date"`
	Host         string `json:"host"`
	CPU          string `json:"cpu"`
	CPUs         int    `json:"cpus"`
	Memory       string `json:"memory"`
	Kernel       string `json:"kernel"`
	LoadBefore   string `json:"loadavg_before"` // /proc/loadavg: was the machine quiet?
	LoadAfter    string `json:"loadavg_after"`
	GoVersion    string `json:"go"`
	RedisVersion string `json:"redis"`
	Duration     string `json:"duration_per_run"`
	Warmup       string `json:"warmup_per_run"`
	Repeats      int    `json:"repeats"`
	TTL          string `json:"ttl"`
	PoolSize     int    `json:"go_redis_pool_size"` // 0: go-redis default
	Hold         string `json:"hold_contended"`
	Smoke        bool   `json:"smoke"`
	Args         string `json:"args"`
}

func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// fmtRate prints a rate with three significant digits: 950, 12.3k, 1.23M.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return trim3(v/1e6) + "M"
	case v >= 1e3:
		return trim3(v/1e3) + "k"
	default:
		return trim3(v)
	}
}

func trim3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtDur prints nanoseconds as µs or ms with three significant digits.
func fmtDur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return trim3(d.Seconds()) + "s"
	case d >= time.Millisecond:
		return trim3(float64(d)/1e6) + "ms"
	default:
		return trim3(float64(d)/1e3) + "µs"
	}
}

func fmtRatio(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// writeMarkdown writes the summary matrix, the goals, the ceiling and the detail table.
func writeMarkdown(w io.Writer, r *report) error {
	var b strings.Builder
	m := r.Meta
	fmt.Fprintf(&b, "# redlock benchmark\n\n")
	fmt.Fprintf(&b, "%s on %s (%s, %d CPUs, %s memory, Linux %s), %s, redis-server %s. Load average %s before the run, %s after. Each contender ran %s per cell after a %s warmup, %d repeat(s), contenders back to back in alternating order; TTL %s; go-redis PoolSize %s; %s.",
		m.Date, m.Host, m.CPU, m.CPUs, m.Memory, m.Kernel, m.GoVersion, m.RedisVersion, m.LoadBefore, m.LoadAfter, m.Duration, m.Warmup, m.Repeats, m.TTL, poolSizeText(m.PoolSize), holdText(m.Hold))
	if m.Smoke {
		b.WriteString(" **Smoke run: the figures are not measurements.**")
	}
	b.WriteString("\n\n")

	b.WriteString("![cycles/s per contender per cell](chart.svg)\n\n")
	b.WriteString("## Throughput\n\n")
	b.WriteString("Cycles/s (lock + release) in uncontended cells, attempts/s (cycles + failed attempts) in contended cells, median over repeats; in brackets the median ratio to redsync and, at N=1, to redislock, each measured side by side in the same repeat.\n\n")
	b.WriteString("| cell |")
	for _, name := range r.order {
		fmt.Fprintf(&b, " %s |", name)
	}
	b.WriteString("\n| --- |")
	for range r.order {
		b.WriteString(" ---: |")
	}
	b.WriteString("\n")
	for _, cr := range r.Cells {
		fmt.Fprintf(&b, "| %s |", cr.Name)
		for _, name := range r.order {
			s := cr.contender(name)
			if s == nil {
				b.WriteString(" |")
				continue
			}
			fmt.Fprintf(&b, " %s", fmtRate(s.Throughput))
			var rs []string
			if s.VsRedsync > 0 {
				rs = append(rs, fmtRatio(s.VsRedsync)+" rs")
			}
			if s.VsRedislock > 0 {
				rs = append(rs, fmtRatio(s.VsRedislock)+" rl")
			}
			if len(rs) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(rs, ", "))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}

	if len(r.Goals) > 0 {
		b.WriteString("\n## Goals of issue 5\n\n| goal | cell | contender | measured | target | met |\n| --- | --- | --- | ---: | ---: | :---: |\n")
		for _, g := range r.Goals {
			met := "no"
			if g.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.Goal, g.Cell, g.Contender, g.Measured, g.Target, met)
		}
	}

	if c := r.Ceiling; c != nil {
		b.WriteString("\n## redis-benchmark ceiling (one master)\n\n")
		if c.Skipped != "" {
			fmt.Fprintf(&b, "Skipped: %s.\n", c.Skipped)
		} else {
			where := "taken before the N=1 cells"
			if len(c.Runs) > 0 && c.Runs[0].Repeat >= 0 {
				where = "each taken beside the contenders of n1-g64-uncontended in one repeat"
			}
			fmt.Fprintf(&b, "`redis-benchmark -c %d -P %d -n %d -r %d`: SET NX PX %s/s, EVALSHA release %s/s, so %s cycles/s (one of each per cycle); median of %d measurement(s) %s.\n",
				c.Clients, c.Pipeline, c.Requests, c.Requests, fmtRate(c.SetRPS), fmtRate(c.EvalshaRPS), fmtRate(c.CyclesPerSec), len(c.Runs), where)
		}
	}

	b.WriteString("\n## Detail\n\n")
	b.WriteString("Rates are medians over repeats; ×redsync and ×redislock compare cycles/s (uncontended) or attempts/s (contended); lock latency is the time of one lock call, successful or not, over all repeats; per-op figures are per attempt (= per cycle when uncontended) and include the harness's own work (one key string per uncontended cycle); client CPU is this process (getrusage), server CPU the masters' `INFO cpu`.\n\n")
	b.WriteString("| cell | contender | cycles/s | failed/s | ×redsync | ×redislock | p50 | p99 | p99.9 | allocs/op | B/op | client CPU/op | server CPU/op | errors | overlaps |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.0f | %s | %s | %d | %d |\n",
				cr.Name, s.Name, fmtRate(s.CyclesPerSec), fmtRate(s.FailedPerSec), fmtRatio(s.VsRedsync), fmtRatio(s.VsRedislock),
				fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.P999), s.AllocsPerOp, s.BytesPerOp, fmtDur(int64(s.ClientCPU*1e3)), fmtDur(int64(s.ServerCPU*1e3)), s.Errors, s.Overlaps)
		}
	}
	var errs []string
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			if s.FirstErr != "" {
				errs = append(errs, fmt.Sprintf("- %s %s (%d): %s", cr.Name, s.Name, s.Errors, s.FirstErr))
			}
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n## Errors (first of each)\n\n" + strings.Join(errs, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func holdText(h string) string {
	if h == "" || h == "0s" {
		return "contended holders release at once"
	}
	return "contended holders hold for " + h
}

func poolSizeText(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// A goalResult checks one target of issue 5 against this run.
type goalResult struct {
	Goal      string `json:"goal"`
	Cell      string `json:"cell"`
	Contender string `json:"contender"`
	Measured  string `json:"measured"`
	Target    string `json:"target"`
	Met       bool   `json:"met"`
}

const allocGoal = "allocations per cycle"

// checkGoals evaluates the targets of issue 5 that this run has cells for.
func checkGoals(r *report) []goalResult {
	cells := map[string]*cellReport{}
	for i := range r.Cells {
		cells[r.Cells[i].Name] = &r.Cells[i]
	}
	var out []goalResult
	ratio := func(goal, cell, who, vs string, target float64) {
		cr := cells[cell]
		if cr == nil {
			return
		}
		s := cr.contender(who)
		if s == nil {
			return
		}
		v := s.VsRedsync
		if vs == "redislock" {
			v = s.VsRedislock
		}
		if v == 0 {
			return
		}
		out = append(out, goalResult{goal, cell, who, fmtRatio(v), fmt.Sprintf(">= %.2f× %s", target, vs), v >= target})
	}
	allocs := func(cell, who string, target float64) {
		if cr := cells[cell]; cr != nil {
			if s := cr.contender(who); s != nil {
				out = append(out, goalResult{allocGoal, cell, who, fmt.Sprintf("%.1f", s.AllocsPerOp), fmt.Sprintf("<= %.0f", target), s.AllocsPerOp <= target})
			}
		}
	}
	for _, who := range []string{"redlock", "redlock-single"} {
		ratio("N=5, 64 goroutines, uncontended", "n5-g64-uncontended", who, "redsync", 8)
		ratio("N=1, 64 goroutines", "n1-g64-uncontended", who, "redsync", 5)
		ratio("N=1, 64 goroutines", "n1-g64-uncontended", who, "redislock", 3)
		ratio("N=1, one goroutine", "n1-g1-uncontended", who, "redsync", 1.3)
		ratio("N=1, one goroutine", "n1-g1-uncontended", who, "redislock", 1)
		ratio("N=5, one goroutine", "n5-g1-uncontended", who, "redsync", 1)
		ratio("contended, 64 goroutines, N=5 (attempts/s)", "n5-g64-contended", who, "redsync", 8)
		if cr := cells["n5-g64-contended"]; cr != nil {
			if s := cr.contender(who); s != nil {
				out = append(out, goalResult{"zero overlapping holders", cr.Name, who, fmt.Sprint(s.Overlaps), "0", s.Overlaps == 0})
			}
		}
		allocs("n1-g1-uncontended", who, 10)
		allocs("n5-g1-uncontended", who, 30)
		if c := r.Ceiling; c != nil && c.CyclesPerSec > 0 {
			if cr := cells["n1-g64-uncontended"]; cr != nil && cr.contender(who) != nil {
				// Per repeat, against the ceiling measured in the same repeat.
				var fs []float64
				for _, run := range cr.runs[who] {
					if cy := c.forRepeat(run.Repeat); cy > 0 && run.Elapsed > 0 {
						fs = append(fs, float64(run.Cycles)/run.Elapsed.Seconds()/cy)
					}
				}
				f := median(fs)
				out = append(out, goalResult{"half of redis-benchmark -P 16", cr.Name, who, fmt.Sprintf("%.2f of %s/s", f, fmtRate(c.CyclesPerSec)), ">= 0.50", f >= 0.5})
			}
		}
	}
	return out
}
