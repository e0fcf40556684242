package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// The "many held locks" workload (-held): one Client holds L locks at once,
// each under Lock.KeepAlive, for a measured time, and the run reports what
// the renewals cost and whether the watchdogs kept up. See README.md.

// heldOptions are the -held-* flags.
type heldOptions struct {
	locks   []int           // -held-locks: locks held in each run of the table
	ttls    []time.Duration // -held-ttls
	holdFor time.Duration   // -held-for: measured time of each run
	search  time.Duration   // -held-search: time budget of the search per (masters, TTL); 0: none
	maxL    int             // -held-max: the largest L the search tries
}

// heldSmoke is the tiny run that -smoke adds: correctness only, no timing.
var heldSmoke = struct {
	locks   int
	ttl     time.Duration
	holdFor time.Duration
}{200, time.Second, time.Second}

// heldSearchFrom is where the search starts when the table has no run
// without loss at its masters and TTL.
const heldSearchFrom = 1000

// heldSearchResolution ends the search once the smallest L lost is within
// this fraction above the largest held.
const heldSearchResolution = 0.125

// heldWorkers obtain (and later stop and release) the locks of a run.
const heldWorkers = 64

// parseCounts reads a comma-separated list of positive counts; a k suffix
// multiplies by 1000 (20k).
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		mul := 1
		if v, ok := strings.CutSuffix(strings.ToLower(f), "k"); ok {
			f, mul = v, 1000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive counts like 1000,5000,20k", s)
		}
		out = append(out, n*mul)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no count", s)
	}
	return out, nil
}

// parseDurations reads a comma-separated list of positive durations.
func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: want positive durations like 2s,10s", s)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no duration", s)
	}
	return out, nil
}

// renewalPeriod is how often a watchdog renews a lock of this TTL by
// default: every ttl/3 (watchdog.go; WithRenewEvery changes it, the
// workload keeps the default).
func renewalPeriod(ttl time.Duration) time.Duration { return ttl / 3 }

// renewalsNeeded is the renewals per second that held locks of this TTL
// need at the default period.
func renewalsNeeded(held int, ttl time.Duration) float64 {
	p := renewalPeriod(ttl)
	if p <= 0 {
		return 0
	}
	return float64(held) / p.Seconds()
}

// heldObserver counts renewals by outcome and lost locks by reason, and
// the backlogs the Client told, with the latest renewal they told of. It
// keeps nothing of an event, so it says it is transient.
type heldObserver struct {
	renewals [len(renewalOutcomes)]atomic.Uint64
	lost     [len(lostReasons)]atomic.Uint64
	backlogs atomic.Uint64
	late     atomic.Int64 // the largest BacklogEvent.Late, ns
}

// renewalOutcomes are the outcomes of a renewal (an ExtendEvent with
// Renewal true), the last one for any other.
var renewalOutcomes = [...]redlock.Outcome{redlock.Extended, redlock.Lost, redlock.Unavailable, redlock.Cancelled, "other"}

// lostReasons are the reasons of a LostEvent, the last one for any other.
var lostReasons = [...]redlock.LostReason{redlock.Refused, redlock.RanOut, redlock.MaxHold, "other"}

func (o *heldObserver) Observe(_ context.Context, e redlock.Event) {
	switch e := e.(type) {
	case *redlock.ExtendEvent:
		if e.Renewal {
			i := slices.Index(renewalOutcomes[:], e.Outcome)
			if i < 0 {
				i = len(renewalOutcomes) - 1
			}
			o.renewals[i].Add(1)
		}
	case *redlock.BacklogEvent:
		if e.Behind {
			o.backlogs.Add(1)
			for late := o.late.Load(); int64(e.Late) > late && !o.late.CompareAndSwap(late, int64(e.Late)); late = o.late.Load() {
			}
		}
	case *redlock.LostEvent:
		i := slices.Index(lostReasons[:], e.Reason)
		if i < 0 {
			i = len(lostReasons) - 1
		}
		o.lost[i].Add(1)
	}
}

func (o *heldObserver) Transient() bool { return true }

// heldCounts is a snapshot of a heldObserver.
type heldCounts struct {
	renewals [len(renewalOutcomes)]uint64
	lost     [len(lostReasons)]uint64
}

func (o *heldObserver) snapshot() heldCounts {
	var c heldCounts
	for i := range c.renewals {
		c.renewals[i] = o.renewals[i].Load()
	}
	for i := range c.lost {
		c.lost[i] = o.lost[i].Load()
	}
	return c
}

// sub is c minus an earlier snapshot, by outcome name.
func (c heldCounts) renewalsSince(a heldCounts) map[string]uint64 {
	m := map[string]uint64{}
	for i, o := range renewalOutcomes {
		if v := c.renewals[i] - a.renewals[i]; v > 0 {
			m[string(o)] = v
		}
	}
	return m
}

func (c heldCounts) lostByReason() map[string]uint64 {
	m := map[string]uint64{}
	for i, r := range lostReasons {
		if c.lost[i] > 0 {
			m[string(r)] = c.lost[i]
		}
	}
	return m
}

// A heldRun is one run of the workload: L locks held at once by one Client
// over N masters, with one TTL.
type heldRun struct {
	Masters int    `json:"masters"`
	TTL     string `json:"ttl"`
	ttl     time.Duration
	Locks   int    `json:"locks"`        // asked for
	Held    int    `json:"held"`         // obtained and kept alive
	Probe   bool   `json:"search_probe"` // a run of the search, not of the table
	HoldFor string `json:"hold"`         // the measured window asked for
	// The obtain phase: L Obtains paced over one renewal period.
	ObtainSecs   float64 `json:"obtain_s"`
	ObtainErrors int     `json:"obtain_errors"`
	FirstErr     string  `json:"first_error,omitempty"`
	// The measured window, from the end of the obtain phase.
	WindowSecs    float64           `json:"window_s"`
	Renewals      map[string]uint64 `json:"renewals_in_window"` // by outcome
	RenewalsAll   map[string]uint64 `json:"renewals_whole_run"` // obtain phase to stop
	Lost          int               `json:"locks_lost"`         // work contexts cancelled (ErrLockLost) by the end of the window
	LostEvents    map[string]uint64 `json:"lost_events"`        // the Observer's LostEvents by reason, whole run
	Backlogs      uint64            `json:"backlogs_told"`      // BacklogEvents (Behind) of the whole run
	MaxLate       float64           `json:"max_late_ms"`        // the latest renewal they told of
	ClientCPU     float64           `json:"client_cpu_s"`       // getrusage over the window
	ServerCPU     []float64         `json:"server_cpu_s"`       // INFO cpu over the window, per server; nil without INFO
	Calls         []uint64          `json:"server_commands"`
	Reads         []uint64          `json:"server_reads"`
	Goroutines    int               `json:"goroutines_delta"`  // after the obtains minus before
	HeapBytes     int64             `json:"heap_delta_bytes"`  // HeapAlloc after a GC, after the obtains minus before
	StackBytes    int64             `json:"stack_delta_bytes"` // StackInuse likewise: the goroutines' stacks, not in the heap
	Released      int               `json:"released"`
	ReleaseLost   int               `json:"release_lost"`
	ReleaseErrors int               `json:"release_errors"`
	KeysLeft      int               `json:"keys_left"` // keys of the run on the masters after the releases
	// Derived figures (heldRun.derive).
	NeededPerSec        float64 `json:"renewals_needed_per_s"`
	MadePerSec          float64 `json:"renewals_made_per_s"`
	ClientCPUPerRenewal float64 `json:"client_cpu_per_renewal_us"` // -1: no renewal
	ServerCPUPerRenewal float64 `json:"redis_cpu_per_renewal_us"`  // -1: unknown
	CallsPerRenewal     float64 `json:"redis_cmds_per_renewal"`
	ReadsPerRenewal     float64 `json:"redis_reads_per_renewal"`
	GoroutinesPerLock   float64 `json:"goroutines_per_lock"`
	HeapPerLock         float64 `json:"heap_per_lock_bytes"`
	StackPerLock        float64 `json:"stack_per_lock_bytes"`
}

// attempts is every renewal of the window, whatever its outcome.
func (r *heldRun) attempts() uint64 {
	var n uint64
	for _, v := range r.Renewals {
		n += v
	}
	return n
}

// derive fills the per-second, per-renewal and per-lock figures.
func (r *heldRun) derive() {
	r.NeededPerSec = renewalsNeeded(r.Held, r.ttl)
	r.MadePerSec, r.ClientCPUPerRenewal, r.ServerCPUPerRenewal = 0, -1, -1
	if r.WindowSecs > 0 {
		r.MadePerSec = float64(r.Renewals[string(redlock.Extended)]) / r.WindowSecs
	}
	n := r.attempts()
	if n > 0 {
		r.ClientCPUPerRenewal = r.ClientCPU * 1e6 / float64(n)
		if r.ServerCPU != nil {
			var s float64
			for _, v := range r.ServerCPU {
				s += v
			}
			r.ServerCPUPerRenewal = s * 1e6 / float64(n)
		}
		var calls, reads uint64
		for i := range r.Calls {
			calls += r.Calls[i]
			reads += r.Reads[i]
		}
		r.CallsPerRenewal, r.ReadsPerRenewal = float64(calls)/float64(n), float64(reads)/float64(n)
	}
	if r.Held > 0 {
		r.GoroutinesPerLock = float64(r.Goroutines) / float64(r.Held)
		r.HeapPerLock = float64(r.HeapBytes) / float64(r.Held)
		r.StackPerLock = float64(r.StackBytes) / float64(r.Held)
	}
}

// withoutLoss says that the run held every lock it asked for to the end
// of its window: every Obtain succeeded and no lock was lost.
func (r *heldRun) withoutLoss() bool {
	return r.Held == r.Locks && r.ObtainErrors == 0 && r.Lost == 0
}

// heldTarget is what runs of the workload share.
type heldTarget struct {
	ep       *endpoints
	poolSize int
	flush    bool // the harness's own servers: FLUSHALL between runs
	// midway, if not nil, runs at the start of the measured window, beside
	// it, with the run's key prefix (held_test.go takes locks away with it).
	midway func(ctx context.Context, prefix string)
}

// runHeld runs the workload once: a fresh Client over ep's masters holds
// locks keys under prefix with this ttl, each under KeepAlive, for
// holdFor after the last was obtained; then stops the keep-alives, releases
// the locks, counts what is left on the masters and deletes it.
func runHeld(ctx context.Context, t heldTarget, ttl time.Duration, locks int, holdFor time.Duration, prefix string) (res *heldRun, err error) {
	ep := t.ep
	reset := func() error { return clearKeys(ctx, ep, t.flush, prefix) }
	if err := reset(); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := reset(); rerr != nil && err == nil {
			res, err = nil, rerr
		}
	}()
	clients := ep.clients(t.poolSize)
	defer func() {
		for _, m := range clients {
			m.Close()
		}
	}()
	obs := &heldObserver{}
	lc, err := redlock.New(clients, redlock.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := lc.Close(); cerr != nil && err == nil {
			res, err = nil, fmt.Errorf("Close: %w", cerr)
		}
	}()
	r := &heldRun{Masters: len(clients), TTL: ttl.String(), ttl: ttl, Locks: locks, HoldFor: holdFor.String()}

	held := make([]*redlock.Lock, locks)
	lctx := make([]context.Context, locks)
	stops := make([]func(), locks)
	var errMu sync.Mutex
	var obtainErrs int
	note := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		obtainErrs++
		if r.FirstErr == "" {
			r.FirstErr = err.Error()
		}
	}
	// each runs f(i) for every lock i on heldWorkers goroutines.
	each := func(f func(i int)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(heldWorkers, locks) {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= locks || ctx.Err() != nil {
						return
					}
					f(i)
				}
			})
		}
		wg.Wait()
	}

	// Two GCs: the first leaves sync.Pools' victims (an earlier run's
	// buffers) for the second to free.
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	// The Obtains are paced over one renewal period, so that the
	// renewals, each a period after its lock's last, spread over it too.
	spread := renewalPeriod(ttl)
	start := time.Now()
	each(func(i int) {
		if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(locks))); d > 0 {
			time.Sleep(d)
		}
		l, err := lc.Obtain(ctx, prefix+strconv.Itoa(i), ttl)
		if err != nil {
			note(err)
			return
		}
		c, stop, err := l.KeepAlive(ctx)
		if err != nil {
			note(fmt.Errorf("KeepAlive: %w", err))
			l.Release(ctx)
			return
		}
		held[i], lctx[i], stops[i] = l, c, stop
	})
	r.ObtainSecs = time.Since(start).Seconds()
	r.ObtainErrors = obtainErrs
	for _, l := range held {
		if l != nil {
			r.Held++
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	r.Goroutines = runtime.NumGoroutine() - g0
	r.HeapBytes = int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	r.StackBytes = int64(m1.StackInuse) - int64(m0.StackInuse)

	// The window. The INFO calls stay outside the client's measurement.
	srv0, infoErr := serverStats(ctx, ep.admin)
	c0 := obs.snapshot()
	cpu0 := processCPU()
	t0 := time.Now()
	if t.midway != nil {
		go t.midway(ctx, prefix)
	}
	select {
	case <-time.After(holdFor):
	case <-ctx.Done():
	}
	cpu1 := processCPU()
	r.WindowSecs = time.Since(t0).Seconds()
	c1 := obs.snapshot()
	var srv1 []serverSample
	if infoErr == nil {
		srv1, infoErr = serverStats(ctx, ep.admin)
	}
	r.ClientCPU = cpu1 - cpu0
	r.Renewals = c1.renewalsSince(c0)
	if infoErr == nil {
		for i := range srv1 {
			r.ServerCPU = append(r.ServerCPU, srv1[i].cpu-srv0[i].cpu)
			r.Calls = append(r.Calls, srv1[i].calls-srv0[i].calls)
			r.Reads = append(r.Reads, srv1[i].reads-srv0[i].reads)
		}
	}
	for i, c := range lctx {
		if c != nil && c.Err() != nil && held[i] != nil {
			r.Lost++ // the watchdog gave up on it (its cause matches ErrLockLost)
		}
	}

	each(func(i int) {
		if stops[i] != nil {
			stops[i]()
		}
	})
	var released, relLost, relErrs atomic.Int64
	each(func(i int) {
		if held[i] == nil {
			return
		}
		switch err := held[i].Release(ctx); {
		case err == nil:
			released.Add(1)
		case errors.Is(err, redlock.ErrLockLost):
			relLost.Add(1)
		default:
			relErrs.Add(1)
			errMu.Lock()
			if r.FirstErr == "" {
				r.FirstErr = "release: " + err.Error()
			}
			errMu.Unlock()
		}
	})
	r.Released, r.ReleaseLost, r.ReleaseErrors = int(released.Load()), int(relLost.Load()), int(relErrs.Load())
	r.RenewalsAll = obs.snapshot().renewalsSince(heldCounts{})
	r.LostEvents = obs.snapshot().lostByReason()
	r.Backlogs, r.MaxLate = obs.backlogs.Load(), float64(obs.late.Load())/1e6
	// A Release returns at a quorum: the last master's delete may still be
	// on its way. A key left is one still there a second later.
	var left int
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := countKeys(ctx, ep.admin, prefix)
		if err != nil {
			return nil, err
		}
		if left = n; left == 0 || time.Now().After(deadline) {
			break
		}
	}
	r.KeysLeft = left
	r.derive()
	return r, ctx.Err()
}

// countKeys counts the keys under prefix on every server (SCAN, never KEYS).
func countKeys(ctx context.Context, admin []*redis.Client, prefix string) (int, error) {
	n := 0
	for _, c := range admin {
		iter := c.Scan(ctx, 0, matchPrefix(prefix), 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if err := iter.Err(); err != nil {
			return n, err
		}
	}
	return n, nil
}
