package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// A heldProbe is one try of the search: L locks, held without loss or not.
type heldProbe struct {
	L  int  `json:"locks"`
	OK bool `json:"without_loss"`
}

// bounds returns the largest L held without loss (0: none) and the smallest
// L above it that was not (0: none).
func bounds(tried []heldProbe) (lo, hi int) {
	for _, p := range tried {
		if p.OK && p.L > lo {
			lo = p.L
		}
	}
	for _, p := range tried {
		if !p.OK && p.L > lo && (hi == 0 || p.L < hi) {
			hi = p.L
		}
	}
	return lo, hi
}

// nextProbe returns the next L the search tries, or 0 when it is done:
// start first; from the largest L held without loss, double it until a
// run loses locks (at most maxL); below the smallest one lost when none was
// held, halve it; then bisect until the smallest L lost is within res
// (a fraction) above the largest held. Tries already made count, whatever
// run made them.
func nextProbe(tried []heldProbe, start, maxL int, res float64) int {
	lo, hi := bounds(tried)
	done := func(l int) bool { return slices.ContainsFunc(tried, func(p heldProbe) bool { return p.L == l }) }
	switch {
	case lo == 0 && (hi == 0 || start < hi) && !done(start):
		return start
	case lo == 0 && hi == 0:
		return 0 // start was tried, neither held nor lost: cannot be
	case lo == 0:
		if hi <= 1 {
			return 0
		}
		return hi / 2
	case hi == 0:
		if lo >= maxL {
			return 0
		}
		return min(2*lo, maxL)
	}
	if hi-lo <= max(1, int(float64(lo)*res)) {
		return 0
	}
	mid := roundTwo((lo + hi) / 2)
	if mid <= lo || mid >= hi {
		mid = (lo + hi) / 2
	}
	return mid
}

// roundTwo rounds n to two significant digits: 12,345 to 12,000.
func roundTwo(n int) int {
	p := 1
	for n/p >= 100 {
		p *= 10
	}
	return (n + p/2) / p * p
}

// A heldLimit is the search's answer at one (masters, TTL).
type heldLimit struct {
	Masters int         `json:"masters"`
	TTL     string      `json:"ttl"`
	HoldFor string      `json:"hold_per_probe"`
	Largest int         `json:"largest_without_loss"` // 0: none
	Lost    int         `json:"smallest_lost"`        // 0: none lost up to the largest tried
	Done    bool        `json:"converged"`            // false: the budget ran out first
	State   string      `json:"state"`                // converged, budget ran out, or reached -held-max
	Probes  []heldProbe `json:"probes"`
	At      *heldRun    `json:"at_largest,omitempty"` // the run that held Largest
}

// probeHold is how long a search probe holds its locks: the table's
// measured time, at least two TTLs (a watchdog that falls behind loses a
// lock once a renewal is more than about half a TTL late).
func probeHold(holdFor, ttl time.Duration) time.Duration { return max(holdFor, 2*ttl) }

// probeEstimate is about how long a probe of L locks takes, for the budget.
func probeEstimate(l int, ttl, hold time.Duration) time.Duration {
	return renewalPeriod(ttl) + hold + time.Duration(l)*100*time.Microsecond + time.Second
}

// heldReport is the workload's section of the report.
type heldReport struct {
	Smoke    bool        `json:"smoke"`
	HoldFor  string      `json:"hold"`
	Runs     []*heldRun  `json:"runs"`
	Limits   []heldLimit `json:"largest_without_loss,omitempty"`
	Cycles   []heldCycle `json:"lock_cycle,omitempty"`
	Problems []string    `json:"problems,omitempty"`
}

// heldCycle is the reference: the client CPU of a whole Obtain + Release
// cycle of redlock at 64 goroutines, uncontended, in the same run.
type heldCycle struct {
	Masters   int     `json:"masters"`
	Cell      string  `json:"cell"`
	Runs      int     `json:"runs"`
	ClientCPU float64 `json:"client_cpu_per_cycle_us"` // median over runs
	ServerCPU float64 `json:"redis_cpu_per_cycle_us"`  // median; -1 unknown
	Cycles    float64 `json:"cycles_per_s"`            // median
}

func (h *heldReport) cycle(n int) *heldCycle {
	for i := range h.Cycles {
		if h.Cycles[i].Masters == n {
			return &h.Cycles[i]
		}
	}
	return nil
}

// heldMasters is the masters of the workload's runs: 1 and 3, as many as
// there are, and all of the user's masters (-masters).
func heldMasters(have int, given bool) []int {
	var out []int
	for _, n := range []int{1, 3} {
		if n <= have {
			out = append(out, n)
		}
	}
	if given && !slices.Contains(out, have) {
		out = append(out, have)
	}
	return out
}

// runHeldWorkload runs the table (every masters x TTL x L), the reference
// lock cycle of each masters, and the search, and returns the section.
func runHeldWorkload(ctx context.Context, o options, ms *masterSet, prefix string) (*heldReport, error) {
	h := &heldReport{Smoke: o.smoke, HoldFor: o.heldOpts.holdFor.String()}
	seq := 0
	next := func() string { seq++; return fmt.Sprintf("%s%d:", prefix, seq) }
	ttls, locks, holdFor := o.heldOpts.ttls, o.heldOpts.locks, o.heldOpts.holdFor
	if o.smoke {
		ttls, locks, holdFor = []time.Duration{heldSmoke.ttl}, []int{heldSmoke.locks}, heldSmoke.holdFor
		h.HoldFor = holdFor.String()
	}
	spec, _ := specOf(subject)
	warmed := false
	for _, n := range heldMasters(len(ms.opts), !ms.owned) {
		ep, err := ms.endpoints(ctx, cell{N: n})
		if err != nil {
			return h, err
		}
		t := heldTarget{ep: ep, poolSize: o.poolSize, flush: ms.owned}
		if !o.smoke {
			c, err := heldReference(ctx, o, t, spec, n, !warmed, next)
			if err != nil {
				return h, err
			}
			warmed = true
			h.Cycles = append(h.Cycles, c)
		}
		for _, ttl := range ttls {
			for _, l := range locks {
				r, err := runHeld(ctx, t, ttl, l, holdFor, next())
				if err != nil {
					return h, fmt.Errorf("held n%d ttl %v %d locks: %w", n, ttl, l, err)
				}
				logHeld(r)
				h.Runs = append(h.Runs, r)
			}
		}
		if o.smoke || o.heldOpts.search <= 0 {
			continue
		}
		for _, ttl := range ttls {
			lim, runs, err := searchHeld(ctx, t, n, ttl, h.Runs, o.heldOpts, next)
			h.Runs = append(h.Runs, runs...)
			if err != nil {
				return h, err
			}
			state := lim.state(o.heldOpts.maxL)
			h.Limits = append(h.Limits, lim)
			fmt.Fprintf(logOut, "  search n%d ttl %-4s: largest held without loss over %s: %s; smallest lost: %s (%d probes, %s)\n",
				n, ttl, lim.HoldFor, fmtInt(lim.Largest), fmtLimit(lim.Lost), len(lim.Probes), state)
		}
	}
	if o.smoke {
		h.Problems = heldProblems(h)
	}
	return h, nil
}

// heldReference measures the client CPU of redlock's whole lock cycle in
// cell n{n}-g64-uncontended, -repeats times (after an unmeasured run when
// warm), so that a renewal's cost reads as a ratio measured in the same run.
func heldReference(ctx context.Context, o options, t heldTarget, spec contenderSpec, n int, warm bool, next func() string) (heldCycle, error) {
	ep := t.ep
	cl := cell{N: n, G: 64, HotKeys: o.hotKeys}
	cfg := runConfig{Duration: o.duration, Warmup: o.warmup, TTL: o.ttl, PoolSize: o.poolSize, Flush: t.flush}
	if warm {
		wcfg := cfg
		wcfg.Duration, wcfg.Warmup = max(o.warmup, 500*time.Millisecond), 0
		if _, err := runOne(ctx, ep, spec, cl, wcfg, next()); err != nil {
			return heldCycle{}, fmt.Errorf("warming up %s: %w", spec.Name, err)
		}
	}
	c := heldCycle{Masters: n, Cell: cl.Name(), Runs: o.repeats}
	var client, server, rate []float64
	for rp := range o.repeats {
		r, err := runOne(ctx, ep, spec, cl, cfg, next())
		if err != nil {
			return c, fmt.Errorf("%s %s: %w", cl.Name(), spec.Name, err)
		}
		if r.Errors > 0 || r.Cycles == 0 {
			return c, fmt.Errorf("%s %s: %d error(s), %d cycles: %s", cl.Name(), spec.Name, r.Errors, r.Cycles, r.FirstErr)
		}
		client = append(client, r.ClientCPU*1e6/float64(r.Cycles))
		server = append(server, cpuPerCycle(r))
		rate = append(rate, float64(r.Cycles)/r.Elapsed.Seconds())
		fmt.Fprintf(logOut, "  %-28s %-20s rep %d: %9s cycles/s  client %8s/cycle  Redis %8s/cycle (reference for the renewals)\n",
			cl.Name(), spec.Name, rp, fmtRate(rate[rp]), fmtUs(client[rp]), fmtUs(server[rp]))
	}
	c.ClientCPU, c.ServerCPU, c.Cycles = median(client), median(server), median(rate)
	return c, nil
}

// searchHeld looks for the largest L held without loss at (n, ttl) within
// the budget, starting from the table's runs there (a loss in a table run
// counts; a run without loss is tried again for the probes' longer hold).
func searchHeld(ctx context.Context, t heldTarget, n int, ttl time.Duration, table []*heldRun, ho heldOptions, next func() string) (heldLimit, []*heldRun, error) {
	hold := probeHold(ho.holdFor, ttl)
	lim := heldLimit{Masters: n, TTL: ttl.String(), HoldFor: hold.String()}
	start := heldSearchFrom
	found := false
	var tried []heldProbe
	for _, r := range table {
		if r.Masters != n || r.ttl != ttl || r.Probe {
			continue
		}
		if !r.withoutLoss() {
			tried = append(tried, heldProbe{L: r.Locks})
			continue
		}
		if !found || r.Locks > start {
			start, found = r.Locks, true
		}
		if holdOf(r) >= hold {
			tried = append(tried, heldProbe{L: r.Locks, OK: true})
		}
	}
	deadline := time.Now().Add(ho.search)
	var runs []*heldRun
	for {
		l := nextProbe(tried, start, ho.maxL, heldSearchResolution)
		if l == 0 {
			lim.Done = true
			break
		}
		if time.Now().Add(probeEstimate(l, ttl, hold)).After(deadline) {
			break
		}
		r, err := runHeld(ctx, t, ttl, l, hold, next())
		if err != nil {
			return lim, runs, fmt.Errorf("search n%d ttl %v %d locks: %w", n, ttl, l, err)
		}
		r.Probe = true
		logHeld(r)
		runs = append(runs, r)
		p := heldProbe{L: l, OK: r.withoutLoss()}
		tried = append(tried, p)
		lim.Probes = append(lim.Probes, p)
	}
	lim.Largest, lim.Lost = bounds(tried)
	for _, r := range append(slices.Clone(table), runs...) {
		if r.Masters == n && r.ttl == ttl && r.withoutLoss() && r.Locks == lim.Largest && holdOf(r) >= hold {
			lim.At = r
		}
	}
	return lim, runs, nil
}

// state says how the search ended, and sets l.State.
func (l *heldLimit) state(maxL int) string {
	switch {
	case !l.Done:
		l.State = "budget ran out"
	case l.Lost == 0 && l.Largest >= maxL:
		l.State = fmt.Sprintf("reached -held-max %s", fmtInt(maxL))
	default:
		l.State = "converged"
	}
	return l.State
}

// holdOf is the measured time a run asked for.
func holdOf(r *heldRun) time.Duration {
	d, _ := time.ParseDuration(r.HoldFor)
	return d
}

func fmtLimit(n int) string {
	if n == 0 {
		return "none"
	}
	return fmtInt(n)
}

// runHeldOnly is -held: the workload alone, on servers of the harness's
// own (1 and 3 masters) or the user's; it writes report.md and report.json.
func runHeldOnly(ctx context.Context, o options) (int, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}
	ms, code, err := openMasters(ctx, o, 3)
	if err != nil {
		return code, err
	}
	defer ms.Close()
	runID := randomID()
	rep := &report{Meta: newMeta(o, ms)}
	where := fmt.Sprintf("%d masters up", len(ms.opts))
	if !ms.owned {
		where = fmt.Sprintf("%d masters given, keys under %s%s:", len(ms.opts), o.prefix, runID)
	}
	fmt.Fprintf(logOut, "bench: many held locks; %s\n", where)
	h, err := runHeldWorkload(ctx, o, ms, o.prefix+runID+":held:")
	rep.Held = h
	if err != nil {
		return 1, err
	}
	cleaned, err := sweep(ctx, ms.admin, o.prefix+runID+":")
	if err != nil {
		return 1, err
	}
	rep.Meta.Cleaned = cleaned
	rep.Meta.LoadAfter = loadAvg()
	for name, write := range map[string]func(*os.File) error{
		"report.md":   func(f *os.File) error { return writeMarkdown(f, rep) },
		"report.json": func(f *os.File) error { return writeJSON(f, rep) },
	} {
		f, err := os.Create(filepath.Join(o.out, name))
		if err != nil {
			return 1, err
		}
		if err := errors.Join(write(f), f.Close()); err != nil {
			return 1, err
		}
	}
	fmt.Fprintf(logOut, "bench: wrote %s, %s\n", filepath.Join(o.out, "report.md"), filepath.Join(o.out, "report.json"))
	if len(h.Problems) > 0 {
		for _, p := range h.Problems {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", p)
		}
		return 1, errors.New("smoke run failed")
	}
	if o.smoke {
		fmt.Fprintln(logOut, "bench: held smoke run passed: every lock obtained, renewed and released, none lost, no key left")
	}
	return 0, nil
}

// finishHeld reads the -held-* lists and checks the -held-* flags.
func (o *options) finishHeld(locks, ttls string) error {
	var err error
	if o.heldOpts.locks, err = parseCounts(locks); err != nil {
		return fmt.Errorf("-held-locks %w", err)
	}
	if o.heldOpts.ttls, err = parseDurations(ttls); err != nil {
		return fmt.Errorf("-held-ttls %w", err)
	}
	if o.heldOpts.holdFor <= 0 {
		return errors.New("-held-for must be > 0")
	}
	if o.heldOpts.search < 0 || o.heldOpts.maxL < 1 {
		return errors.New("-held-search must be >= 0 and -held-max >= 1")
	}
	return nil
}
