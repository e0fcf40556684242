package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A goalResult checks one of the project's targets against this run.
type goalResult struct {
	Goal      string `json:"target"`
	Cell      string `json:"cell"`
	Contender string `json:"contender"`
	Measured  string `json:"measured"`
	Target    string `json:"want"`
	Met       bool   `json:"met"`
}

// allocTargets are the most allocations per cycle redlock may make, per
// cell (one goroutine: every cycle pays its own way).
var allocTargets = map[string]float64{"n1-g1-uncontended": 10, "n5-g1-uncontended": 30}

// allocChecked are the contenders held to allocTargets.
var allocChecked = []string{subject, "redlock-single"}

const (
	allocGoal    = "allocations per cycle"
	autopipeline = "goredis-autopipeline"
)

// checkGoals evaluates the targets that this run has cells for. Ratios are
// the subject's throughput over another contender's, measured side by side.
func checkGoals(r *report) []goalResult {
	cells := map[string]*cellReport{}
	for i := range r.Cells {
		cells[r.Cells[i].Name] = &r.Cells[i]
	}
	var out []goalResult
	find := func(cell, who string) *contenderSummary {
		if cr := cells[cell]; cr != nil {
			return cr.contender(who)
		}
		return nil
	}
	ratio := func(goal, cell, vs string, target float64) {
		s := find(cell, subject)
		if s == nil || s.Ratio[vs] == 0 {
			return
		}
		v := s.Ratio[vs]
		out = append(out, goalResult{goal, cell, subject, fmtRatio(v), fmt.Sprintf(">= %.2f× %s", target, vs), v >= target})
	}
	// noHigher checks that the subject's Redis CPU per cycle, or lock p99, is no higher than vs's.
	noHigher := func(goal, cell, vs string, cpu bool) {
		s, o := find(cell, subject), find(cell, vs)
		if s == nil || o == nil {
			return
		}
		if cpu {
			if s.ServerCPU < 0 || o.ServerCPU < 0 {
				return
			}
			out = append(out, goalResult{goal, cell, subject, fmtUs(s.ServerCPU), "<= " + fmtUs(o.ServerCPU) + " (" + vs + ")", s.ServerCPU <= o.ServerCPU})
			return
		}
		out = append(out, goalResult{goal, cell, subject, fmtDur(s.P99), "<= " + fmtDur(o.P99) + " (" + vs + ")", s.P99 <= o.P99})
	}

	const n5, n1 = "n5-g64-uncontended", "n1-g64-uncontended"
	ratio("N=5, 64 goroutines", n5, autopipeline, 1.3)
	noHigher("N=5, 64 goroutines: Redis CPU per cycle", n5, autopipeline, true)
	noHigher("N=5, 64 goroutines: lock p99", n5, autopipeline, false)
	ratio("N=5, 64 goroutines", n5, "redsync", 8)
	ratio("N=1, 64 goroutines", n1, autopipeline, 1.2)
	noHigher("N=1, 64 goroutines: Redis CPU per cycle", n1, autopipeline, true)
	ratio("N=1, 64 goroutines", n1, "redsync", 5)
	ratio("N=1, 64 goroutines", n1, "redislock", 3)
	for _, cell := range []string{"n1-g1-uncontended", "n5-g1-uncontended"} {
		if s := find(cell, subject); s != nil {
			for _, vs := range r.order {
				if _, ok := s.Ratio[vs]; ok {
					ratio("one goroutine: no slower than any contender", cell, vs, 1)
				}
			}
		}
	}
	ratio("N=1, one goroutine", "n1-g1-uncontended", "redsync", 1.3)
	ratio("contended, 64 goroutines, N=5 (decisions/s)", "n5-g64-contended", "redsync", 8)
	if r.Meta.Hold != "" && r.Meta.Hold != "0s" {
		if s := find("n5-g64-contended", subject); s != nil {
			out = append(out, goalResult{"zero overlapping holders (each lock held " + r.Meta.Hold + ")", "n5-g64-contended", subject, fmt.Sprint(s.Overlaps), "0", s.Overlaps == 0})
		}
	}
	for _, who := range allocChecked {
		for _, cell := range slices.Sorted(maps.Keys(allocTargets)) {
			most := allocTargets[cell]
			if s := find(cell, who); s != nil && s.Cycles > 0 {
				out = append(out, goalResult{allocGoal, cell, who, fmt.Sprintf("%.1f", s.AllocsPerCycle), fmt.Sprintf("<= %.0f", most), s.AllocsPerCycle <= most})
			}
		}
	}
	if c := r.Ceiling; c != nil && c.CyclesPerSec > 0 {
		if cr := cells[n1]; cr != nil && cr.contender(subject) != nil {
			// Per repeat, against the ceiling measured in the same repeat.
			var fs []float64
			for _, run := range cr.runs[subject] {
				if cy := c.forRepeat(run.Repeat); cy > 0 && run.Elapsed > 0 {
					fs = append(fs, float64(run.Cycles)/run.Elapsed.Seconds()/cy)
				}
			}
			f := median(fs)
			out = append(out, goalResult{"half of redis-benchmark -P 16", n1, subject, fmt.Sprintf("%.2f of %s/s", f, fmtRate(c.CyclesPerSec)), ">= 0.50", f >= 0.5})
		}
	}
	return out
}

// writeReading sums up, contender by contender, where the subject is ahead
// and where it is not: throughput, Redis CPU per cycle and lock p99.
func writeReading(b *strings.Builder, r *report) {
	fmt.Fprintf(b, "How %s compares with each contender over the cells both ran in. Throughput ratios are %s's over the contender's, measured side by side (ahead: above 1.05, even: 0.95 to 1.05, behind: below 0.95); Redis CPU per cycle and lock p99 count as higher when more than 5%% above the contender's.", subject, subject)
	if r.Meta.Smoke {
		b.WriteString(" (A smoke run: these are not measurements.)")
	}
	b.WriteString("\n\n")
	for _, other := range r.order {
		if other == subject {
			continue
		}
		var ahead, even, behind []string
		var best float64
		var cpuHigh, p99High []string
		cells := 0
		for _, cr := range r.Cells {
			s, o := cr.contender(subject), cr.contender(other)
			if s == nil || o == nil || s.Ratio[other] == 0 {
				continue
			}
			cells++
			v := s.Ratio[other]
			best = max(best, v)
			switch {
			case v > 1.05:
				ahead = append(ahead, cr.Name)
			case v >= 0.95:
				even = append(even, cr.Name)
			default:
				behind = append(behind, fmt.Sprintf("%s %s", cr.Name, fmtRatio(v)))
			}
			if s.ServerCPU > 0 && o.ServerCPU > 0 && s.ServerCPU > 1.05*o.ServerCPU {
				cpuHigh = append(cpuHigh, fmt.Sprintf("%s %s against %s", cr.Name, fmtUs(s.ServerCPU), fmtUs(o.ServerCPU)))
			}
			if float64(s.P99) > 1.05*float64(o.P99) {
				p99High = append(p99High, fmt.Sprintf("%s %s against %s", cr.Name, fmtDur(s.P99), fmtDur(o.P99)))
			}
		}
		if cells == 0 {
			continue
		}
		spec, _ := specOf(other)
		fmt.Fprintf(b, "- **%s** (%s), %d cell(s): %s ahead in %d", other, spec.Kind, cells, subject, len(ahead))
		if len(ahead) > 0 {
			fmt.Fprintf(b, " (up to %s)", fmtRatio(best))
		}
		fmt.Fprintf(b, ", even in %d, behind in %d", len(even), len(behind))
		if len(behind) > 0 {
			fmt.Fprintf(b, " (%s)", listSome(behind, 4))
		}
		b.WriteString(".")
		if len(cpuHigh) > 0 {
			fmt.Fprintf(b, " Redis CPU per cycle higher in %d: %s.", len(cpuHigh), listSome(cpuHigh, 3))
		} else {
			b.WriteString(" Redis CPU per cycle never higher.")
		}
		if len(p99High) > 0 {
			fmt.Fprintf(b, " Lock p99 higher in %d: %s.", len(p99High), listSome(p99High, 3))
		} else {
			b.WriteString(" Lock p99 never higher.")
		}
		b.WriteString("\n")
	}
}

func listSome(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(" and %d more", len(xs)-n)
}

// smokeProblems lists what must not happen in any run, however short or
// loaded: a contender that completed no cycle, an error of this library's
// contenders or the baselines, a refusal where no other owner can exist
// (uncontended cells), an overlap, or a missed allocation target (counted,
// not timed). A peer library's errors are its own (a rueidislock waiter
// that missed its wake-up waits out the key's validity, past the wait's
// bound): smokeNotes lists them, and the report keeps them.
func smokeProblems(r *report) []string {
	var p []string
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			if s.Cycles == 0 {
				p = append(p, fmt.Sprintf("%s %s completed no cycle", cr.Name, s.Name))
			}
			if s.Errors > 0 && !isPeer(s.Name) {
				p = append(p, fmt.Sprintf("%s %s: %d error(s), first: %s", cr.Name, s.Name, s.Errors, s.FirstErr))
			}
			if !cr.Contended && s.Taken > 0 {
				p = append(p, fmt.Sprintf("%s %s: %d attempt(s) refused as held by another owner, on fresh keys", cr.Name, s.Name, s.Taken))
			}
			if s.Overlaps > 0 {
				p = append(p, fmt.Sprintf("%s %s: %d overlapping holders", cr.Name, s.Name, s.Overlaps))
			}
		}
	}
	for _, g := range r.Goals {
		if g.Goal == allocGoal && !g.Met {
			p = append(p, fmt.Sprintf("%s %s: %s allocations per cycle, want %s", g.Cell, g.Contender, g.Measured, g.Target))
		}
	}
	if r.Held != nil {
		p = append(p, r.Held.Problems...)
	}
	return slices.Clip(p)
}

// smokeNotes lists the errors of peer libraries, which do not fail a smoke
// run (see smokeProblems).
func smokeNotes(r *report) []string {
	var n []string
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			if s.Errors > 0 && isPeer(s.Name) {
				n = append(n, fmt.Sprintf("%s %s (a peer library): %d error(s), first: %s", cr.Name, s.Name, s.Errors, s.FirstErr))
			}
		}
	}
	return n
}

// isPeer reports whether the contender named name is a peer library's.
func isPeer(name string) bool {
	s, ok := specOf(name)
	return ok && s.Kind == kindPeer
}
