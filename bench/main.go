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
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/masterlist"
)

type options struct {
	out           string
	duration      time.Duration
	warmup        time.Duration
	repeats       int
	smoke         bool
	cells         string
	contenders    string
	ttl           time.Duration
	poolSize      int
	rbRequests    int
	noCeiling     bool
	cpuprofile    string
	memprofile    string
	hold          time.Duration
	masterSpecs   string // -masters: the user's own masters
	prefix        string
	allowExisting bool
	latencies     []time.Duration
	hotKeys       int
	masters       []int
	goroutines    []int
	held          bool // -held: the many-held-locks workload instead of the matrix
	heldOpts      heldOptions
}

func main() {
	var o options
	var latencies, heldLocks, heldTTLs string
	flag.StringVar(&o.out, "out", defaultOut(), "directory for report.md, report.json and chart.svg")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of each contender in each cell and repeat")
	flag.DurationVar(&o.warmup, "warmup", -1, "unmeasured run before each measurement (default duration/5, at most 1s)")
	flag.IntVar(&o.repeats, "repeats", 3, "repeats of each cell; the contenders' order alternates between repeats")
	flag.BoolVar(&o.smoke, "smoke", false, "CI mode: every cell for 150ms, 1 repeat; exits non-zero on any error (a peer library's noted only), any refusal on fresh keys, any overlap, a contender with no cycle, or a missed allocation target")
	flag.StringVar(&o.cells, "cells", "", "regexp: run only cells whose name matches, e.g. 'n5-g64' or 'n1-.*-contended'")
	flag.StringVar(&o.contenders, "contenders", "", "regexp: run only contenders whose name matches, e.g. '^redlock'")
	flag.DurationVar(&o.ttl, "ttl", 10*time.Second, "lock TTL")
	flag.IntVar(&o.poolSize, "pool-size", 0, "go-redis PoolSize of every contender's clients (0: go-redis default, 10 per GOMAXPROCS)")
	flag.IntVar(&o.rbRequests, "rb-requests", 0, "requests per redis-benchmark command (default: 300k per second of -duration, at least 100k)")
	flag.BoolVar(&o.noCeiling, "no-redis-benchmark", false, "skip the redis-benchmark ceiling")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (narrow it with -cells and -contenders; with -held, of its runs)")
	flag.DurationVar(&o.hold, "hold", -1, "in contended cells, how long a holder keeps the lock, so overlaps can be seen (default 0, or 100µs with -smoke)")
	flag.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile (pprof allocs, sampled) of the whole run to this file")
	flag.StringVar(&o.masterSpecs, "masters", "", "comma-separated masters to run against instead of starting redis-servers: host:port, redis://[user:password@]host:port[/db] or rediss://...; N runs over the first N of them")
	flag.StringVar(&o.prefix, "prefix", "redlock-bench:", "every key the benchmark makes starts with this prefix and a run id")
	flag.BoolVar(&o.allowExisting, "allow-existing-keys", false, "with -masters: run even when keys under -prefix exist (another run's, left alone)")
	flag.StringVar(&latencies, "latency", "100us,500us", "added latency each way of the latency cells, comma-separated ('' for none; only on the harness's own servers)")
	flag.IntVar(&o.hotKeys, "hot-keys", defaultHotKeys, "hot keys of the contended cells")
	flag.BoolVar(&o.held, "held", false, "run the many-held-locks workload (one Client holds L locks under KeepAlive) instead of the matrix; with -smoke, its tiny version only")
	flag.StringVar(&heldLocks, "held-locks", "1000,5000,20000", "-held: locks held at once in each run of the table, comma-separated (20k = 20000)")
	flag.StringVar(&heldTTLs, "held-ttls", "2s,10s", "-held: lock TTLs, comma-separated")
	flag.DurationVar(&o.heldOpts.holdFor, "held-for", 10*time.Second, "-held: measured time each run holds its locks, from when the last was obtained")
	flag.DurationVar(&o.heldOpts.search, "held-search", 3*time.Minute, "-held: time budget of the search for the largest number of locks held without loss, per masters and TTL (0: no search)")
	flag.IntVar(&o.heldOpts.maxL, "held-max", 200_000, "-held: the largest number of locks the search tries")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := o.finishHeld(heldLocks, heldTTLs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := o.finish(latencies); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
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

// defaultHotKeys is how many hot keys the contended cells share.
const defaultHotKeys = 16

// finish fills the defaults that depend on other flags and checks them.
func (o *options) finish(latencies string) error {
	o.masters = []int{1, 3, 5}
	o.goroutines = []int{1, 16, 64}
	for _, f := range strings.Split(latencies, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return fmt.Errorf("-latency %q: want durations like 100us,500us", latencies)
		}
		o.latencies = append(o.latencies, d)
	}
	if o.masterSpecs != "" {
		specs, err := masterlist.Split(o.masterSpecs)
		if err != nil {
			return fmt.Errorf("-masters: %w", err)
		}
		n := len(specs)
		o.masters = slices.DeleteFunc(o.masters, func(m int) bool { return m > n })
		if !slices.Contains(o.masters, n) {
			o.masters = append(o.masters, n)
		}
		o.latencies = nil  // the user's network has its own
		o.noCeiling = true // redis-benchmark would write outside the prefix
	}
	if o.prefix == "" {
		return errors.New("-prefix must not be empty")
	}
	if o.smoke {
		o.duration, o.repeats = 150*time.Millisecond, 1
		if o.warmup < 0 {
			o.warmup = 30 * time.Millisecond
		}
		if len(o.latencies) > 1 {
			o.latencies = o.latencies[:1] // the code path, not the figures
		}
		if o.rbRequests == 0 {
			o.rbRequests = 20_000 // the ceiling's code path, not its figure
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
	if o.hotKeys == 0 {
		o.hotKeys = defaultHotKeys // options built without the flags
	}
	if o.hotKeys < 1 {
		return errors.New("-hot-keys must be >= 1")
	}
	if o.repeats < 1 || o.duration <= 0 {
		return errors.New("-repeats must be >= 1 and -duration > 0")
	}
	return nil
}

// defaultOut is bench/out whether the harness runs from the repository root or from bench/.
func defaultOut() string {
	if data, err := os.ReadFile("go.mod"); err == nil && strings.Contains(string(data), "module github.com/redlock-go/redlock/bench") {
		return "out"
	}
	return filepath.Join("bench", "out")
}

// matrix lists the cells to run, filtered by -cells: N masters x
// goroutines x {uncontended, contended}; with the harness's own servers also
// latency cells (N in {1, 5}, 1 and 64 goroutines, uncontended, and
// n5-g64-contended, per added latency) and Redlock over three independent
// 3-shard Redis Clusters (64 goroutines).
func matrix(o options) ([]cell, error) {
	re, err := regexp.Compile(o.cells)
	if err != nil {
		return nil, fmt.Errorf("-cells: %w", err)
	}
	var all []cell
	for _, n := range o.masters {
		for _, g := range o.goroutines {
			for _, contended := range []bool{false, true} {
				all = append(all, cell{N: n, G: g, Contended: contended, HotKeys: o.hotKeys})
			}
		}
	}
	for _, d := range o.latencies {
		for _, n := range []int{1, 5} {
			for _, g := range []int{1, 64} {
				all = append(all, cell{N: n, G: g, Latency: d, HotKeys: o.hotKeys})
			}
		}
		all = append(all, cell{N: 5, G: 64, Contended: true, Latency: d, HotKeys: o.hotKeys})
	}
	if o.masterSpecs == "" {
		for _, contended := range []bool{false, true} {
			all = append(all, cell{N: 3, Shards: 3, Cluster: true, G: 64, Contended: contended, HotKeys: o.hotKeys})
		}
	}
	var cells []cell
	for _, c := range all {
		if re.MatchString(c.Name()) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("-cells %q matches no cell", o.cells)
	}
	return cells, nil
}

// logOut receives the progress lines.
var logOut io.Writer = os.Stderr

func run(ctx context.Context, o options) (int, error) {
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
	if o.held {
		return runHeldOnly(ctx, o)
	}
	cells, err := matrix(o)
	if err != nil {
		return 2, err
	}
	re, err := regexp.Compile(o.contenders)
	if err != nil {
		return 2, fmt.Errorf("-contenders: %w", err)
	}
	var cs []contenderSpec
	for _, c := range contenders {
		if re.MatchString(c.Name) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return 2, fmt.Errorf("-contenders %q matches no contender", o.contenders)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}

	maxN := 0
	for _, c := range cells {
		if !c.Cluster {
			maxN = max(maxN, c.N)
		}
	}
	ms, code, err := openMasters(ctx, o, max(maxN, 1))
	if err != nil {
		return code, err
	}
	defer ms.Close()
	runID := randomID()
	runPrefix := o.prefix + runID + ":"
	rep := &report{Meta: newMeta(o, ms)}
	for _, c := range cs {
		rep.order = append(rep.order, c.Name)
	}
	where := fmt.Sprintf("%d masters up", len(ms.opts))
	if !ms.owned {
		where = fmt.Sprintf("%d masters given, keys under %s", len(ms.opts), runPrefix)
	}
	fmt.Fprintf(logOut, "bench: %s; %d cells, %s per contender, %d repeat(s)\n", where, len(cells), o.duration, o.repeats)

	// The ceiling is measured beside the contenders in each repeat of
	// n1-g64-uncontended, the cell it is compared with; without that
	// cell, once before the N=1 cells.
	const ceilingCell = "n1-g64-uncontended"
	if !o.noCeiling && slices.ContainsFunc(cells, func(c cell) bool { return c.N == 1 && !c.Cluster && c.Latency == 0 }) {
		c, err := newCeiling(ctx, ms, 64, 16, o.rbRequests, runPrefix+"rb:")
		if err != nil {
			return 1, err
		}
		rep.Ceiling = c
		if c.Skipped != "" {
			fmt.Fprintln(logOut, "bench: skipping the ceiling:", c.Skipped)
		} else if !slices.ContainsFunc(cells, func(c cell) bool { return c.Name() == ceilingCell }) {
			if err := measureCeilingLog(ctx, ms, c, -1); err != nil {
				return 1, err
			}
		}
	}

	cfg := runConfig{Duration: o.duration, Warmup: o.warmup, TTL: o.ttl, PoolSize: o.poolSize, Hold: o.hold, Flush: ms.owned}
	seq := 0
	nextPrefix := func() string { seq++; return fmt.Sprintf("%s%d:", runPrefix, seq) }
	// The first measured run of a process came out slow (a cold heap, page
	// faults, fresh servers), and each cell's own warmup did not cure it; so
	// every contender first runs the first cell once, unmeasured.
	if !o.smoke {
		first := cells[0]
		ep, err := ms.endpoints(ctx, first)
		if err != nil {
			return 1, err
		}
		for _, c := range cs {
			if !c.supports(first) {
				continue
			}
			wcfg := cfg
			wcfg.Duration, wcfg.Warmup = max(o.warmup, 500*time.Millisecond), 0
			if _, err := runOne(ctx, ep, c, first, wcfg, nextPrefix()); err != nil {
				return 1, fmt.Errorf("warming up %s: %w", c.Name, err)
			}
		}
	}
	for _, cl := range cells {
		var here []contenderSpec
		for _, c := range cs {
			if c.supports(cl) {
				here = append(here, c)
			}
		}
		if len(here) == 0 {
			continue
		}
		ep, err := ms.endpoints(ctx, cl)
		if err != nil {
			return 1, fmt.Errorf("%s: %w", cl.Name(), err)
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
				ccfg := cfg
				if _, ok := allocTargets[cl.Name()]; ok && o.smoke && slices.Contains(allocChecked, c.Name) {
					// Where allocations are checked, the lanes settle first.
					ccfg.Warmup = max(ccfg.Warmup, 200*time.Millisecond)
				}
				r, err := runOne(ctx, ep, c, cl, ccfg, nextPrefix())
				if err != nil {
					return 1, fmt.Errorf("%s %s: %w", cl.Name(), c.Name, err)
				}
				r.Repeat, r.Position = rp, pos
				runs = append(runs, r)
				fmt.Fprintf(logOut, "  %-28s %-20s rep %d: %9s cycles/s %9s taken/s  p50 %8s  p99 %8s  %6.1f allocs/cycle  Redis %8s/cycle  errors %d  overlaps %d\n",
					cl.Name(), c.Name, rp, fmtRate(float64(r.Cycles)/r.Elapsed.Seconds()), fmtRate(float64(r.Taken)/r.Elapsed.Seconds()),
					fmtDur(int64(r.Lat.Quantile(0.5))), fmtDur(int64(r.Lat.Quantile(0.99))), per(float64(r.Mallocs), r.Cycles),
					fmtUs(cpuPerCycle(r)), r.Errors, r.Overlaps)
			}
			if withCeiling && rp%2 == 1 {
				if err := measureCeilingLog(ctx, ms, rep.Ceiling, rp); err != nil {
					return 1, err
				}
			}
		}
		rep.Cells = append(rep.Cells, summarize(cl, ep.rttUs, rep.order, runs))
	}
	if o.smoke {
		// The many-held-locks workload's tiny version: correctness only.
		h, err := runHeldWorkload(ctx, o, ms, runPrefix+"held:")
		rep.Held = h
		if err != nil {
			return 1, err
		}
	}
	// Every key of the run is gone already (each run deletes its own); this
	// catches what a contender left behind after its run's cleanup, if anything.
	cleaned, err := sweep(ctx, append(slices.Clone(ms.admin), ms.extras.cadmin...), runPrefix)
	if err != nil {
		return 1, err
	}
	rep.Meta.Cleaned = cleaned
	rep.Goals = checkGoals(rep)
	rep.Meta.LoadAfter = loadAvg()

	if err := writeReport(o.out, rep); err != nil {
		return 1, err
	}
	wrote := []string{filepath.Join(o.out, "report.md"), filepath.Join(o.out, "report.json"), filepath.Join(o.out, "chart.svg")}
	if headline, err := writeHeadline(o.out, rep); err != nil {
		return 1, err
	} else if headline {
		wrote = append(wrote, filepath.Join(o.out, "headline.svg"))
	}
	fmt.Fprintf(logOut, "bench: wrote %s\n", strings.Join(wrote, ", "))

	for _, n := range smokeNotes(rep) {
		fmt.Fprintln(logOut, "bench: note:", n)
	}
	if problems := smokeProblems(rep); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", p)
		}
		if o.smoke {
			return 1, errors.New("smoke run failed")
		}
	} else if o.smoke {
		fmt.Fprintln(logOut, "bench: smoke run passed: every contender completed cycles in every cell, no error (peers' aside), no refusal on fresh keys, no overlap, allocation targets met; every held lock obtained, renewed and released, none lost, no key left")
	}
	return 0, nil
}

// openMasters starts n redis-servers, or connects to the user's masters
// (-masters) and refuses, unless -allow-existing-keys, when keys under
// -prefix are there; then describes them. On an error it returns the exit code.
func openMasters(ctx context.Context, o options, n int) (*masterSet, int, error) {
	var ms *masterSet
	var err error
	if o.masterSpecs != "" {
		specs, err := masterlist.Split(o.masterSpecs)
		if err != nil {
			return nil, 2, fmt.Errorf("-masters: %w", err)
		}
		ms, err = externalMasters(specs)
		if err != nil {
			return nil, 2, err
		}
	} else {
		ms, err = startMasters(n)
		if err != nil {
			return nil, 1, err
		}
	}
	if err := ms.describe(ctx); err != nil {
		ms.Close()
		return nil, 1, err
	}
	if !ms.owned {
		// Keys under the prefix that this run did not make: another run's,
		// maybe still running. Leave them, and refuse unless told.
		for i, c := range ms.admin {
			found, err := findKeys(ctx, c, o.prefix, 1)
			if err != nil {
				ms.Close()
				return nil, 1, fmt.Errorf("SCAN %s: %w", ms.opts[i].Addr, err)
			}
			if len(found) > 0 && !o.allowExisting {
				ms.Close()
				return nil, 2, fmt.Errorf("%s holds keys under %q (for example %q), from another run of the benchmark or another program: wait until they are gone, choose another -prefix, or pass -allow-existing-keys (they are left alone either way)", ms.opts[i].Addr, o.prefix, found[0])
			}
		}
	}
	return ms, 0, nil
}

// newMeta says where and how the run measures.
func newMeta(o options, ms *masterSet) meta {
	m := meta{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		CPU:        cpuModel(),
		CPUs:       runtime.NumCPU(),
		Memory:     memTotal(),
		Kernel:     readTrim("/proc/sys/kernel/osrelease"),
		LoadBefore: loadAvg(),
		GoVersion:  runtime.Version(),
		Own:        ms.owned,
		Masters:    ms.info,
		Prefix:     o.prefix,
		Duration:   o.duration.String(),
		Warmup:     o.warmup.String(),
		Repeats:    o.repeats,
		TTL:        o.ttl.String(),
		PoolSize:   o.poolSize,
		Hold:       o.hold.String(),
		Smoke:      o.smoke,
		Args:       redactArgs(os.Args[1:]),
	}
	m.Host, _ = os.Hostname()
	return m
}

// cpuPerCycle is a run's Redis CPU per cycle in µs, or -1 without INFO.
func cpuPerCycle(r *runResult) float64 {
	v := r.serverCPU()
	if v < 0 {
		return -1
	}
	return per(v*1e6, r.Cycles)
}

// redactArgs hides the passwords of -masters URLs in the recorded command line.
func redactArgs(args []string) string {
	out := slices.Clone(args)
	for i, a := range out {
		parts, err := masterlist.Split(a)
		if err != nil {
			out[i] = "(not shown: it may hold a password)"
			continue
		}
		for j, p := range parts {
			parts[j] = redactURL(p)
		}
		out[i] = strings.Join(parts, ",")
	}
	return strings.Join(out, " ")
}

func measureCeilingLog(ctx context.Context, ms *masterSet, c *ceiling, rp int) error {
	r, err := c.measure(ctx, ms, rp)
	if err != nil {
		return err
	}
	fmt.Fprintf(logOut, "  %-28s %-20s rep %d: %9s cycles/s (SET NX PX %s/s, EVALSHA %s/s; -c %d -P %d -n %d)\n",
		"n1 ceiling", "redis-benchmark", rp, fmtRate(r.CyclesPerSec), fmtRate(r.SetRPS), fmtRate(r.EvalshaRPS), c.Clients, c.Pipeline, c.Requests)
	return nil
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
