// Command bench measures redlock side by side with go-redsync/redsync and
// bsm/redislock on redis-server processes it starts itself. See README.md.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

type options struct {
	out        string
	duration   time.Duration
	warmup     time.Duration
	repeats    int
	smoke      bool
	cells      string
	contenders string
	ttl        time.Duration
	poolSize   int
	rbRequests int
	noCeiling  bool
	cpuprofile string
	memprofile string
	hold       time.Duration
	hotKeys    int
	masters    []int
	goroutines []int
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", defaultOut(), "directory for report.md, report.json and chart.svg")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of each contender in each cell and repeat")
	flag.DurationVar(&o.warmup, "warmup", -1, "unmeasured run before each measurement (default duration/5, at most 1s)")
	flag.IntVar(&o.repeats, "repeats", 3, "repeats of each cell; the contenders' order alternates between repeats")
	flag.BoolVar(&o.smoke, "smoke", false, "CI mode: 1s per cell, 1 repeat; exits non-zero unless every contender completed cycles in every cell, no overlap happened and redlock met its allocation goals")
	flag.StringVar(&o.cells, "cells", "", "regexp: run only cells whose name matches, e.g. 'n5-g64' or 'n1-.*-contended'")
	flag.StringVar(&o.contenders, "contenders", "", "regexp: run only contenders whose name matches, e.g. '^redlock'")
	flag.DurationVar(&o.ttl, "ttl", 10*time.Second, "lock TTL")
	flag.IntVar(&o.poolSize, "pool-size", 0, "go-redis PoolSize of every contender's clients (0: go-redis default, 10 per GOMAXPROCS)")
	flag.IntVar(&o.rbRequests, "rb-requests", 0, "requests per redis-benchmark command (default: 300k per second of -duration, at least 100k)")
	flag.BoolVar(&o.noCeiling, "no-redis-benchmark", false, "skip the redis-benchmark ceiling")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (narrow it with -cells and -contenders)")
	flag.DurationVar(&o.hold, "hold", -1, "in contended cells, how long a holder keeps the lock, so overlaps can be seen (default 0, or 100µs with -smoke)")
	flag.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile (pprof allocs, sampled) of the whole run to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	o.hotKeys = 16
	o.masters = []int{1, 3, 5}
	o.goroutines = []int{1, 16, 64}
	if o.smoke {
		o.duration, o.repeats = time.Second, 1
		if o.warmup < 0 {
			o.warmup = 200 * time.Millisecond
		}
		if o.rbRequests == 0 {
			o.rbRequests = 100_000
		}
		if o.hold < 0 {
			o.hold = 100 * time.Microsecond
		}
	}
	o.hold = max(o.hold, 0)
	if o.warmup < 0 {
		o.warmup = min(o.duration/5, time.Second)
	}
	if o.rbRequests == 0 {
		o.rbRequests = max(100_000, int(300_000*o.duration.Seconds()))
	}
	if o.repeats < 1 || o.duration <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -repeats must be >= 1 and -duration > 0")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// defaultOut is bench/out whether the harness runs from the repository root or from bench/.
func defaultOut() string {
	if data, err := os.ReadFile("go.mod"); err == nil && strings.Contains(string(data), "module github.com/redlock-go/redlock/bench") {
		return "out"
	}
	return filepath.Join("bench", "out")
}

// matrix lists the cells to run, filtered by -cells.
func matrix(o options) ([]cell, error) {
	re, err := regexp.Compile(o.cells)
	if err != nil {
		return nil, fmt.Errorf("-cells: %w", err)
	}
	var cells []cell
	for _, n := range o.masters {
		for _, g := range o.goroutines {
			for _, contended := range []bool{false, true} {
				c := cell{N: n, G: g, Contended: contended, HotKeys: o.hotKeys}
				if re.MatchString(c.Name()) {
					cells = append(cells, c)
				}
			}
		}
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("-cells %q matches no cell", o.cells)
	}
	return cells, nil
}

func run(ctx context.Context, o options) (int, error) {
	cells, err := matrix(o)
	if err != nil {
		return 2, err
	}
	re, err := regexp.Compile(o.contenders)
	if err != nil {
		return 2, fmt.Errorf("-contenders: %w", err)
	}
	var cs []contender
	for _, c := range allContenders() {
		if re.MatchString(c.Name()) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return 2, fmt.Errorf("-contenders %q matches no contender", o.contenders)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return 1, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 1, err
		}
		defer pprof.StopCPUProfile()
	}

	if o.memprofile != "" {
		defer func() {
			f, err := os.Create(o.memprofile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -memprofile:", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintln(os.Stderr, "bench: -memprofile:", err)
			}
		}()
	}

	maxN := 0
	for _, c := range cells {
		maxN = max(maxN, c.N)
	}
	ms, err := startMasters(maxN)
	if err != nil {
		return 1, err
	}
	defer ms.Close()

	rep := &report{Meta: meta{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		CPU:        cpuModel(),
		CPUs:       runtime.NumCPU(),
		Memory:     memTotal(),
		Kernel:     readTrim("/proc/sys/kernel/osrelease"),
		LoadBefore: loadAvg(),
		GoVersion:  runtime.Version(),
		Duration:   o.duration.String(),
		Warmup:     o.warmup.String(),
		Repeats:    o.repeats,
		TTL:        o.ttl.String(),
		PoolSize:   o.poolSize,
		Hold:       o.hold.String(),
		Smoke:      o.smoke,
		Args:       strings.Join(os.Args[1:], " "),
	}}
	rep.Meta.Host, _ = os.Hostname()
	if v, err := ms.admin[0].Info(ctx, "server").Result(); err == nil {
		rep.Meta.RedisVersion = infoValue(v, "redis_version")
	}
	for _, c := range cs {
		rep.order = append(rep.order, c.Name())
	}
	fmt.Fprintf(os.Stderr, "bench: %d masters up; %d cells, %s per contender, %d repeat(s)\n", maxN, len(cells), o.duration, o.repeats)

	// The ceiling is measured beside the contenders in each repeat of
	// n1-g64-uncontended, the cell issue 5 compares with it; without that
	// cell, once before the N=1 cells.
	const ceilingCell = "n1-g64-uncontended"
	if !o.noCeiling && slices.ContainsFunc(cells, func(c cell) bool { return c.N == 1 }) {
		c, err := newCeiling(ctx, ms, 64, 16, o.rbRequests)
		if err != nil {
			return 1, err
		}
		rep.Ceiling = c
		if c.Skipped != "" {
			fmt.Fprintln(os.Stderr, "bench: skipping the ceiling:", c.Skipped)
		} else if !slices.ContainsFunc(cells, func(c cell) bool { return c.Name() == ceilingCell }) {
			if err := measureCeilingLog(ctx, ms, c, -1); err != nil {
				return 1, err
			}
		}
	}

	cfg := runConfig{Duration: o.duration, Warmup: o.warmup, TTL: o.ttl, PoolSize: o.poolSize, Hold: o.hold}
	runID := randomID()
	// The first measured run of a process came out slow (a cold heap, page
	// faults, fresh servers), and each cell's own warmup did not cure it; so
	// every contender first runs the first cell once, unmeasured.
	first := cells[0]
	for _, c := range cs {
		if !c.Supports(first.N) {
			continue
		}
		wcfg := cfg
		wcfg.Duration, wcfg.Warmup = max(o.warmup, 500*time.Millisecond), 0
		if _, err := runOne(ctx, ms, c, first, wcfg, runID+":warm"); err != nil {
			return 1, fmt.Errorf("warming up %s: %w", c.Name(), err)
		}
	}
	for _, cl := range cells {
		var here []contender
		for _, c := range cs {
			if c.Supports(cl.N) {
				here = append(here, c)
			}
		}
		var runs []*runResult
		for rp := range o.repeats {
			order := slices.Clone(here)
			if rp%2 == 1 {
				slices.Reverse(order)
			}
			cl.repeatSeed = uint64(rp + 1)
			withCeiling := cl.Name() == ceilingCell && rep.Ceiling != nil && rep.Ceiling.Skipped == ""
			if withCeiling && rp%2 == 0 {
				if err := measureCeilingLog(ctx, ms, rep.Ceiling, rp); err != nil {
					return 1, err
				}
			}
			for pos, c := range order {
				if err := ctx.Err(); err != nil {
					return 1, err
				}
				r, err := runOne(ctx, ms, c, cl, cfg, fmt.Sprintf("%s:%d", runID, rp))
				if err != nil {
					return 1, fmt.Errorf("%s %s: %w", cl.Name(), c.Name(), err)
				}
				r.Repeat, r.Position = rp, pos
				runs = append(runs, r)
				fmt.Fprintf(os.Stderr, "  %-22s %-15s rep %d: %9s cycles/s %9s failed/s  p50 %8s  p99 %8s  %6.1f allocs/op  errors %d  overlaps %d\n",
					cl.Name(), c.Name(), rp, fmtRate(float64(r.Cycles)/r.Elapsed.Seconds()), fmtRate(float64(r.Failures)/r.Elapsed.Seconds()),
					fmtDur(int64(r.Lat.Quantile(0.5))), fmtDur(int64(r.Lat.Quantile(0.99))), float64(r.Mallocs)/float64(max(r.Attempts(), 1)), r.Errors, r.Overlaps)
			}
			if withCeiling && rp%2 == 1 {
				if err := measureCeilingLog(ctx, ms, rep.Ceiling, rp); err != nil {
					return 1, err
				}
			}
		}
		rep.Cells = append(rep.Cells, summarize(cl, rep.order, runs))
	}
	rep.Goals = checkGoals(rep)
	rep.Meta.LoadAfter = loadAvg()

	if err := writeReport(o.out, rep); err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s\n", strings.Join([]string{
		filepath.Join(o.out, "report.md"), filepath.Join(o.out, "report.json"), filepath.Join(o.out, "chart.svg")}, ", "))

	if problems := smokeProblems(rep); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", p)
		}
		if o.smoke {
			return 1, errors.New("smoke run failed")
		}
	} else if o.smoke {
		fmt.Fprintln(os.Stderr, "bench: smoke run passed: every contender completed cycles in every cell, no overlap, allocation goals met")
	}
	return 0, nil
}

func measureCeilingLog(ctx context.Context, ms *masterSet, c *ceiling, rp int) error {
	r, err := c.measure(ctx, ms, rp)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  %-22s %-15s rep %d: %9s cycles/s (SET NX PX %s/s, EVALSHA %s/s; -c %d -P %d -n %d)\n",
		"n1 ceiling", "redis-benchmark", rp, fmtRate(r.CyclesPerSec), fmtRate(r.SetRPS), fmtRate(r.EvalshaRPS), c.Clients, c.Pipeline, c.Requests)
	return nil
}

// smokeProblems lists cells where a contender completed no cycle or where
// two holders overlapped, and allocation goals missed. Allocations per cycle
// are counted, not timed, so they hold on any machine.
func smokeProblems(r *report) []string {
	var p []string
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			if s.Cycles == 0 {
				p = append(p, fmt.Sprintf("%s %s completed no cycle (errors %d, first: %s)", cr.Name, s.Name, s.Errors, s.FirstErr))
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
	return p
}

func writeReport(dir string, r *report) error {
	for name, write := range map[string]func(*os.File) error{
		"report.md":   func(f *os.File) error { return writeMarkdown(f, r) },
		"report.json": func(f *os.File) error { return writeJSON(f, r) },
		"chart.svg":   func(f *os.File) error { return writeSVG(f, r) },
	} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// infoValue returns the value of name in an INFO reply.
func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// cpuModel returns the CPU model from /proc/cpuinfo, or GOARCH.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// memTotal returns MemTotal from /proc/meminfo in GiB.
func memTotal() string {
	for _, line := range strings.Split(readTrim("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f kB", &kb); err == nil {
				return fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return "?"
}
