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
)

// runConfig holds what every measured run shares.
type runConfig struct {
	Duration time.Duration
	Warmup   time.Duration
	TTL      time.Duration
	PoolSize int           // go-redis PoolSize for every contender; 0 keeps go-redis's default
	Hold     time.Duration // in contended cells, how long a holder keeps the lock before releasing it
	// Flush lets a run empty the servers (FLUSHALL) between contenders: only
	// on servers the harness started. Otherwise it deletes its own keys.
	Flush bool
}

// runResult is one contender's measurement in one cell and repeat.
type runResult struct {
	Contender string
	Repeat    int
	Position  int // 0 = ran first in its repeat
	Elapsed   time.Duration
	Attempts  uint64 // lock calls
	Cycles    uint64 // successful lock + release
	Taken     uint64 // attempts refused because other owners held the key
	Errors    uint64 // lock or unlock calls that failed otherwise
	FirstErr  string
	Overlaps  uint64 // times a lock was granted while another goroutine held it
	Lat       histogram
	// Contended cells: Gap is each hand-over, from the holder's release
	// call to the next grant of the same key; Hold each hold, from the
	// grant to the release call; Release each release call, to its return.
	Gap, Hold, Release histogram
	Mallocs            uint64    // runtime.MemStats.Mallocs delta
	Bytes              uint64    // runtime.MemStats.TotalAlloc delta
	ClientCPU          float64   // seconds, getrusage(RUSAGE_SELF) user+sys delta
	ServerCPU          []float64 // seconds, INFO cpu used_cpu_sys+used_cpu_user delta of each server behind the cell; nil without INFO
	Calls              []uint64  // commands each server executed (INFO commandstats delta); nil without INFO
	Reads              []uint64  // socket reads each server made (INFO stats total_reads_processed delta)
	Writes             uint64    // latency cells: chunks the delay proxies forwarded
}

// Decisions is the number of attempts answered either way: cycles plus refusals.
func (r *runResult) Decisions() uint64 { return r.Cycles + r.Taken }

// serverCPU is the CPU seconds of every server behind the cell together, or
// -1 when INFO was not allowed.
func (r *runResult) serverCPU() float64 {
	if r.ServerCPU == nil {
		return -1
	}
	var s float64
	for _, v := range r.ServerCPU {
		s += v
	}
	return s
}

type workerStats struct {
	attempts, cycles, taken, errors, overlaps uint64
	firstErr                                  error
	lat, gap, hold, release                   histogram
}

// hangAfter bounds how long the goroutines of a run may take to finish their
// last call once the run is over; every contender's calls are bounded well below it.
const hangAfter = 30 * time.Second

// runOne measures contender spec in cell cl over ep: fresh clients, setup,
// warmup, then the measured run. Each of cl.G goroutines loops lock,
// (check), release. Every key it makes starts with prefix; it deletes them
// (or flushes owned servers) before it returns.
func runOne(ctx context.Context, ep *endpoints, spec contenderSpec, cl cell, cfg runConfig, prefix string) (res *runResult, err error) {
	reset := func() error { return clearKeys(ctx, ep, cfg.Flush, prefix) }
	if err := reset(); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := reset(); rerr != nil && err == nil {
			res, err = nil, rerr
		}
	}()
	clients := ep.clients(cfg.PoolSize)
	defer func() {
		for _, m := range clients {
			m.Close()
		}
	}()
	c := spec.New()
	if err := c.Setup(target{Clients: clients, Options: ep.opts, TTL: cfg.TTL, Prefix: prefix}); err != nil {
		return nil, fmt.Errorf("%s setup: %w", spec.Name, err)
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
		hot[i] = prefix + "hot:" + strconv.Itoa(i)
	}
	holders := make([]atomic.Int32, len(hot))
	// freed holds, per hot key, when its last holder began to release it
	// (ns since the loop's start; 0 before the first release).
	freed := make([]atomic.Int64, len(hot))
	stats := make([]workerStats, cl.G)

	loop := func(keys string, d time.Duration) (time.Duration, error) {
		var stop atomic.Bool
		var wg sync.WaitGroup
		for i := range freed {
			freed[i].Store(0)
		}
		start := time.Now()
		for g := range cl.G {
			wg.Go(func() {
				st := &stats[g]
				w := workers[g]
				rng := rand.New(rand.NewPCG(cl.repeatSeed, uint64(g)))
				buf := []byte(keys + strconv.Itoa(g) + ":")
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
					st.attempts++
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
						st.taken++
						continue
					}
					if hk >= 0 {
						granted := int64(time.Since(start))
						if f := freed[hk].Load(); f != 0 {
							st.gap.Record(time.Duration(granted - f))
						}
						if holders[hk].Add(1) != 1 {
							st.overlaps++
						}
						// Without a hold the window between the two counter
						// updates is a few nanoseconds, too short to catch
						// two holders granted at nearly the same time. The
						// hold sleeps in nanosleep: time.Sleep in a process
						// whose goroutines all wait (a contender woken by
						// the masters, not by its timers) takes up to a
						// millisecond more, which would charge the waiting
						// contenders a longer hold than the polling ones.
						if cfg.Hold > 0 {
							preciseSleep(cfg.Hold)
						}
						holders[hk].Add(-1)
						now := int64(time.Since(start))
						st.hold.Record(time.Duration(now - granted))
						freed[hk].Store(now)
					}
					t1 := time.Now()
					if err := w.Unlock(ctx); err != nil {
						st.errors++
						if st.firstErr == nil {
							st.firstErr = fmt.Errorf("unlock: %w", err)
						}
						continue
					}
					if hk >= 0 {
						st.release.Record(time.Since(t1))
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
			return 0, fmt.Errorf("%s: lock or release calls still running %s after the end of the run (goroutines above)", spec.Name, hangAfter)
		}
	}

	if cfg.Warmup > 0 {
		if _, err := loop(prefix+"w", cfg.Warmup); err != nil {
			return nil, err
		}
		if err := reset(); err != nil {
			return nil, err
		}
	}
	for i := range stats {
		stats[i] = workerStats{}
	}

	// The INFO calls stay outside the client's measurement (they allocate).
	srv0, infoErr := serverStats(ctx, ep.admin)
	var writes0 uint64
	if ep.writes != nil {
		writes0 = ep.writes.Load()
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	elapsed, err := loop(prefix+"u", cfg.Duration)
	if err != nil {
		return nil, err
	}
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)
	var srv1 []serverSample
	if infoErr == nil {
		srv1, infoErr = serverStats(ctx, ep.admin)
	}

	r := &runResult{
		Contender: spec.Name,
		Elapsed:   elapsed,
		Mallocs:   m1.Mallocs - m0.Mallocs,
		Bytes:     m1.TotalAlloc - m0.TotalAlloc,
		ClientCPU: cpu1 - cpu0,
	}
	if ep.writes != nil {
		r.Writes = ep.writes.Load() - writes0
	}
	if infoErr == nil {
		for i := range srv1 {
			r.ServerCPU = append(r.ServerCPU, srv1[i].cpu-srv0[i].cpu)
			r.Calls = append(r.Calls, srv1[i].calls-srv0[i].calls)
			r.Reads = append(r.Reads, srv1[i].reads-srv0[i].reads)
		}
	}
	for i := range stats {
		st := &stats[i]
		r.Attempts += st.attempts
		r.Cycles += st.cycles
		r.Taken += st.taken
		r.Errors += st.errors
		r.Overlaps += st.overlaps
		if r.FirstErr == "" && st.firstErr != nil {
			r.FirstErr = st.firstErr.Error()
		}
		r.Lat.Merge(&st.lat)
		r.Gap.Merge(&st.gap)
		r.Hold.Merge(&st.hold)
		r.Release.Merge(&st.release)
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

// clearKeys empties the masters for a run: FLUSHALL on servers the harness
// owns (flush), else a sweep of the run's keys under prefix.
func clearKeys(ctx context.Context, ep *endpoints, flush bool, prefix string) error {
	if flush {
		for _, c := range ep.admin {
			if err := c.FlushAll(ctx).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	_, err := sweep(ctx, ep.admin, prefix)
	return err
}
