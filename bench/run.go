package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cell is one point of the matrix.
type cell struct {
	N          int  // masters
	G          int  // goroutines
	Contended  bool // 16 hot keys instead of a fresh key per cycle
	HotKeys    int
	repeatSeed uint64
}

func (c cell) Name() string {
	mode := "uncontended"
	if c.Contended {
		mode = "contended"
	}
	return fmt.Sprintf("n%d-g%d-%s", c.N, c.G, mode)
}

// runConfig holds what every measured run shares.
type runConfig struct {
	Duration time.Duration
	Warmup   time.Duration
	TTL      time.Duration
	PoolSize int           // go-redis PoolSize for every contender; 0 keeps go-redis's default
	Hold     time.Duration // in contended cells, how long a holder keeps the lock before releasing it
}

// runResult is one contender's measurement in one cell and repeat.
type runResult struct {
	Contender string
	Repeat    int
	Position  int // 0 = ran first in its repeat
	Elapsed   time.Duration
	Cycles    uint64 // successful lock + release
	Failures  uint64 // attempts that found the lock held
	Errors    uint64 // lock or unlock calls that returned an error
	FirstErr  string
	Overlaps  uint64 // times a lock was granted while another goroutine held it
	Lat       histogram
	Mallocs   uint64  // runtime.MemStats.Mallocs delta
	Bytes     uint64  // runtime.MemStats.TotalAlloc delta
	ClientCPU float64 // seconds, getrusage(RUSAGE_SELF) user+sys delta
	ServerCPU float64 // seconds, INFO cpu used_cpu_sys+used_cpu_user delta over the cell's masters
}

// Attempts is the number of lock attempts that got an answer: cycles plus failures.
func (r *runResult) Attempts() uint64 { return r.Cycles + r.Failures }

type workerStats struct {
	cycles, failures, errors, overlaps uint64
	firstErr                           error
	lat                                histogram
}

// hangAfter bounds how long the goroutines of a run may take to finish their
// last call once the run is over; every contender's calls are bounded well below it.
const hangAfter = 30 * time.Second

// runOne measures contender c in cell cl: fresh clients, setup, warmup, then
// the measured run. Each of cl.G goroutines loops lock, (check), release.
func runOne(ctx context.Context, ms *masterSet, c contender, cl cell, cfg runConfig, runID string) (res *runResult, err error) {
	if err := ms.flush(ctx, cl.N); err != nil {
		return nil, err
	}
	masters := make([]redis.UniversalClient, cl.N)
	for i, addr := range ms.addrs(cl.N) {
		masters[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: cfg.PoolSize, ContextTimeoutEnabled: true})
	}
	defer func() {
		for _, m := range masters {
			m.Close()
		}
	}()
	if err := c.Setup(masters, cfg.TTL); err != nil {
		return nil, fmt.Errorf("%s setup: %w", c.Name(), err)
	}
	defer func() {
		// A Close that fails is the contender's error, reported with the run.
		if cerr := c.Close(); cerr != nil && res != nil {
			res.Errors++
			res.FirstErr = strings.TrimPrefix(res.FirstErr+"; ", "; ") + "close: " + cerr.Error()
		}
	}()

	workers := make([]worker, cl.G)
	for i := range workers {
		workers[i] = c.NewWorker()
	}
	hot := make([]string, cl.HotKeys)
	for i := range hot {
		hot[i] = "bench:hot:" + strconv.Itoa(i)
	}
	holders := make([]atomic.Int32, len(hot))
	stats := make([]workerStats, cl.G)

	loop := func(prefix string, d time.Duration) (time.Duration, error) {
		var stop atomic.Bool
		var wg sync.WaitGroup
		start := time.Now()
		for g := range cl.G {
			wg.Go(func() {
				st := &stats[g]
				w := workers[g]
				rng := rand.New(rand.NewPCG(cl.repeatSeed, uint64(g)))
				buf := []byte(prefix + strconv.Itoa(g) + ":")
				base := len(buf)
				var seq uint64
				for !stop.Load() {
					var key string
					hk := -1
					if cl.Contended {
						hk = rng.IntN(len(hot))
						key = hot[hk]
					} else {
						seq++
						buf = strconv.AppendUint(buf[:base], seq, 10)
						key = string(buf)
					}
					t0 := time.Now()
					ok, err := w.Lock(ctx, key)
					st.lat.Record(time.Since(t0))
					if err != nil {
						st.errors++
						if st.firstErr == nil {
							st.firstErr = err
						}
						continue
					}
					if !ok {
						st.failures++
						continue
					}
					if hk >= 0 {
						if holders[hk].Add(1) != 1 {
							st.overlaps++
						}
						// Without a hold the window between the two counter
						// updates is a few nanoseconds, too short to catch
						// two holders granted at nearly the same time.
						if cfg.Hold > 0 {
							time.Sleep(cfg.Hold)
						}
						holders[hk].Add(-1)
					}
					if err := w.Unlock(ctx); err != nil {
						st.errors++
						if st.firstErr == nil {
							st.firstErr = fmt.Errorf("unlock: %w", err)
						}
						continue
					}
					st.cycles++
				}
			})
		}
		time.Sleep(d)
		stop.Store(true)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return time.Since(start), nil
		case <-time.After(hangAfter):
			// A call that never returns is a bug worth a stack dump; the
			// stuck goroutines cannot be stopped, so the caller exits.
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			return 0, fmt.Errorf("%s: lock or release calls still running %s after the end of the run (goroutines above)", c.Name(), hangAfter)
		}
	}

	if cfg.Warmup > 0 {
		if _, err := loop("bench:w:"+runID+":", cfg.Warmup); err != nil {
			return nil, err
		}
		if err := ms.flush(ctx, cl.N); err != nil {
			return nil, err
		}
	}
	for i := range stats {
		stats[i] = workerStats{}
	}

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	srv0, err := ms.serverCPU(ctx, cl.N)
	if err != nil {
		return nil, err
	}
	elapsed, err := loop("bench:u:"+runID+":", cfg.Duration)
	if err != nil {
		return nil, err
	}
	srv1, err := ms.serverCPU(ctx, cl.N)
	if err != nil {
		return nil, err
	}
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)

	r := &runResult{
		Contender: c.Name(),
		Elapsed:   elapsed,
		Mallocs:   m1.Mallocs - m0.Mallocs,
		Bytes:     m1.TotalAlloc - m0.TotalAlloc,
		ClientCPU: cpu1 - cpu0,
		ServerCPU: srv1 - srv0,
	}
	for i := range stats {
		st := &stats[i]
		r.Cycles += st.cycles
		r.Failures += st.failures
		r.Errors += st.errors
		r.Overlaps += st.overlaps
		if r.FirstErr == "" && st.firstErr != nil {
			r.FirstErr = st.firstErr.Error()
		}
		r.Lat.Merge(&st.lat)
	}
	return r, nil
}

// processCPU returns this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
