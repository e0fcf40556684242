package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A row is one scenario (or variant) in the results table.
type row struct {
	t         *testing.T
	sub       *subject
	sharedEnv bool     // the masters and clients outlive this row (subtests of one env)
	caught    []string // with a mutant: the MUST checks that failed
	Scenario  string   `json:"scenario"`
	Mutant    string   `json:"mutant,omitempty"` // the broken lock's knobs, for a mutation check
	Kind      string   `json:"kind"`             // MUST, DOCUMENTS, or MUTATION
	Fault     string   `json:"fault"`
	Figures   []figure `json:"figures"`
	Expected  string   `json:"expected"`
	Verdict   string   `json:"verdict"`
	Notes     []string `json:"notes,omitempty"`
	Seconds   float64  `json:"seconds"`
}

type figure struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

var results struct {
	mu   sync.Mutex
	rows []*row
}

// newRow starts a table row for t, run against sub; its verdict is set
// when t ends. With a mutant, the row is a mutation check: it passes when
// the MUST named by sub.expect fails.
func newRow(t *testing.T, sub *subject, scenario, kind, fault, expected string) *row {
	r := &row{t: t, sub: sub, Scenario: scenario, Kind: kind, Fault: fault, Expected: expected}
	if sub.mutant != "" {
		r.Mutant, r.Kind = sub.mutant, "MUTATION"
		r.Expected = "fails: " + sub.expect
	}
	start := time.Now()
	results.mu.Lock()
	results.rows = append(results.rows, r)
	results.mu.Unlock()
	t.Cleanup(func() {
		// Runs after the scenario's own cleanups: every Client is closed, so
		// none of the library's goroutines may be left.
		if !t.Skipped() && !r.sharedEnv {
			left := lockGoroutinesAtMost(sub, 0)
			r.set("lib_goroutines_left", left)
			r.must(left == 0, "%d lock goroutines left after every Client was closed", left)
		}
		if r.Mutant != "" && !t.Skipped() && !r.wasCaught() {
			t.Errorf("%s: mutant %q passed: the check %q did not fail (failed: %q)", r.Scenario, r.Mutant, sub.expect, r.caught)
		}
		results.mu.Lock()
		defer results.mu.Unlock()
		r.Seconds = float64(time.Since(start).Milliseconds()) / 1000
		switch {
		case t.Skipped():
			r.Verdict = "SKIP"
		case t.Failed():
			r.Verdict = "FAIL"
		case r.Mutant != "":
			r.Verdict = "PASS (check failed)"
		case kind == "DOCUMENTS":
			r.Verdict = "PASS (reproduced)"
		default:
			r.Verdict = "PASS"
		}
	})
	return r
}

// set adds or replaces a figure. Durations print in ms.
func (r *row) set(name string, v any) {
	if d, ok := v.(time.Duration); ok {
		v = float64(d.Microseconds()) / 1000
		name += "_ms"
	}
	if f, ok := v.(float64); ok {
		v = float64(int64(f*1000+0.5)) / 1000
	}
	results.mu.Lock()
	defer results.mu.Unlock()
	for i := range r.Figures {
		if r.Figures[i].Name == name {
			r.Figures[i].Value = v
			return
		}
	}
	r.Figures = append(r.Figures, figure{name, v})
}

func (r *row) note(format string, args ...any) {
	results.mu.Lock()
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	results.mu.Unlock()
}

// must fails the test when a guarantee does not hold; on a mutation check
// it records the failure instead, and reports ok.
func (r *row) must(ok bool, format string, args ...any) bool {
	r.t.Helper()
	if !ok {
		msg := fmt.Sprintf(format, args...)
		r.note("MUST failed: %s", msg)
		if r.Mutant != "" {
			results.mu.Lock()
			r.caught = append(r.caught, msg)
			results.mu.Unlock()
		} else {
			r.t.Errorf("%s: MUST failed: %s", r.Scenario, msg)
		}
	}
	return ok
}

// wasCaught reports whether the check the mutant targets failed.
func (r *row) wasCaught() bool {
	results.mu.Lock()
	defer results.mu.Unlock()
	for _, c := range r.caught {
		for _, want := range strings.Split(r.sub.expect, "|") {
			if strings.Contains(c, want) {
				return true
			}
		}
	}
	return false
}

// documents fails the test when a documented violation did not show: the
// docs would then claim a weakness the suite cannot reproduce. A mutation
// check ignores it.
func (r *row) documents(violated bool, format string, args ...any) {
	r.t.Helper()
	if !violated && r.Mutant == "" {
		msg := fmt.Sprintf(format, args...)
		r.note("documented violation absent: %s", msg)
		r.t.Errorf("%s: documented violation did not reproduce: %s", r.Scenario, msg)
	}
}

func (r *row) figures() string {
	var b strings.Builder
	for i, f := range r.Figures {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%v", f.Name, f.Value)
	}
	return b.String()
}

// writeResults prints the table to w and writes out/results.json and
// out/results.txt.
func writeResults(w io.Writer, dir string) error {
	results.mu.Lock()
	defer results.mu.Unlock()
	if len(results.rows) == 0 {
		return nil
	}
	// In scenario order (S1, S2, ... S14), whatever order the tests ran in.
	slices.SortStableFunc(results.rows, func(x, y *row) int { return cmp.Compare(scenarioNumber(x.Scenario), scenarioNumber(y.Scenario)) })
	var b strings.Builder
	fmt.Fprintf(&b, "\nchaos results (%s)\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "%-34s | %-9s | %-44s | %-48s | %s\n", "scenario", "kind", "fault", "expected", "verdict")
	b.WriteString(strings.Repeat("-", 160) + "\n")
	pass, fail, skip := 0, 0, 0
	var mutants []*row
	count := func(r *row) {
		switch {
		case strings.HasPrefix(r.Verdict, "PASS"):
			pass++
		case r.Verdict == "FAIL":
			fail++
		default:
			skip++
		}
	}
	for _, r := range results.rows {
		if r.Mutant != "" {
			mutants = append(mutants, r)
			continue
		}
		fmt.Fprintf(&b, "%-34s | %-9s | %-44s | %-48s | %s\n", r.Scenario, r.Kind, r.Fault, r.Expected, r.Verdict)
		fmt.Fprintf(&b, "%-34s   figures: %s\n", "", r.figures())
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "%-34s   note: %s\n", "", n)
		}
		count(r)
	}
	if len(mutants) > 0 {
		fmt.Fprintf(&b, "\nmutation checks: each row's check run against a broken lock must fail\n")
		fmt.Fprintf(&b, "%-34s | %-24s | %-44s | %s\n", "scenario", "mutant", "check that must fail", "verdict")
		b.WriteString(strings.Repeat("-", 160) + "\n")
		for _, r := range mutants {
			fmt.Fprintf(&b, "%-34s | %-24s | %-44s | %s\n", r.Scenario, r.Mutant, r.sub.expect, r.Verdict)
			for _, c := range r.caught {
				if len(c) > 200 {
					c = c[:200] + "..."
				}
				fmt.Fprintf(&b, "%-34s   failed: %s\n", "", strings.ReplaceAll(c, "\n", " "))
			}
			count(r)
		}
	}
	fmt.Fprintf(&b, "chaos: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	io.WriteString(w, b.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(results.rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.txt"), []byte(b.String()), 0o644)
}

// scenarioNumber is n in "Sn name"; 0 when there is none.
func scenarioNumber(s string) int {
	num, _, _ := strings.Cut(strings.TrimPrefix(s, "S"), " ")
	n, _ := strconv.Atoi(num)
	return n
}
