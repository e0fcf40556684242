package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// load is a contended workload: workers obtain one key, run a critical
// section (lost-update counter, optional fenced write), record it in the
// ledger and release. With sets, worker w takes sets[w % len(sets)]
// instead, all its keys at once (ObtainMulti), and records the hold under
// each of them.
type load struct {
	c       Locker
	key     string
	sets    [][]string
	ttl     time.Duration
	workers int
	dur     time.Duration // stop starting attempts after this
	maxIter int           // per worker, a second bound
	retry   time.Duration // RetryEvery; 0: one attempt
	// obtainTimeout bounds each Obtain through its context.
	obtainTimeout time.Duration
	hold          time.Duration // between the counter's read and write
	// fenced: the lock has fencing tokens; with res, each holder writes
	// its fence there.
	fenced bool

	ledger  *Ledger
	counter *Counter
	res     *FencedResource
	// counters, with sets, are a lost-update counter per key (made by run):
	// holders of disjoint sets run at once, and share no counter.
	counters map[string]*Counter
}

type loadStats struct {
	mu          sync.Mutex
	tries       int
	acquired    int
	notObtained int
	noDetail    int // ErrNotObtained without a *QuorumError
	noDetailMsg string
	releaseMsg  string
	otherErrs   map[string]int
	lats        []time.Duration // every Obtain call
	okLats      []time.Duration // successful Obtains
	maxWait     time.Duration   // per worker: from wanting the lock to holding it
	pastCtx     time.Duration   // the most an Obtain returned after its context's deadline
	worst       string          // the slowest Obtain's outcome
	releaseLost int             // Release said ErrLockLost
	releaseErr  int             // Release failed otherwise
	elapsed     time.Duration
	byWorker    []int // holds per worker
}

func (s *loadStats) other(err error) {
	if s.otherErrs == nil {
		s.otherErrs = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	s.otherErrs[msg]++
}

// run drives the workload until dur ends or ctx is done.
func (l *load) run(ctx context.Context) *loadStats {
	s := &loadStats{}
	if l.ledger == nil {
		l.ledger = &Ledger{}
	}
	if l.counter == nil {
		l.counter = &Counter{}
	}
	if len(l.sets) > 0 {
		l.counters = map[string]*Counter{}
		for _, set := range l.sets {
			for _, k := range set {
				l.counters[k] = &Counter{}
			}
		}
	}
	if l.maxIter == 0 {
		l.maxIter = 100000
	}
	if l.obtainTimeout == 0 {
		l.obtainTimeout = time.Second
	}
	s.byWorker = make([]int, l.workers)
	start := time.Now()
	deadline := start.Add(l.dur)
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Go(func() { l.worker(ctx, w, deadline, s) })
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	return s
}

func (l *load) worker(ctx context.Context, w int, deadline time.Time, s *loadStats) {
	var opts []Opt
	if l.retry > 0 {
		opts = append(opts, RetryEvery(l.retry))
	}
	wantSince := time.Now()
	for i := 0; i < l.maxIter && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		octx, cancel := context.WithTimeout(ctx, l.obtainTimeout)
		t0 := time.Now()
		lock, err := l.obtain(octx, w, opts)
		got := time.Now()
		lat := got.Sub(t0)
		dl, _ := octx.Deadline()
		cancel()
		s.mu.Lock()
		s.tries++
		s.lats = append(s.lats, lat)
		if got.Sub(dl) > s.pastCtx {
			s.pastCtx = got.Sub(dl)
			s.worst = fmt.Sprintf("%v after %v: %v", lat, l.obtainTimeout, err)
		}
		if err != nil {
			var qe *redlock.QuorumError
			switch {
			case errors.Is(err, redlock.ErrNotObtained):
				s.notObtained++
				if !errors.As(err, &qe) && ctx.Err() == nil {
					s.noDetail++
					s.noDetailMsg = err.Error()
				}
			case ctx.Err() != nil:
			default:
				s.other(err)
			}
			s.mu.Unlock()
			if l.retry == 0 {
				time.Sleep(2 * time.Millisecond) // no busy loop without a retry strategy
			}
			continue
		}
		s.acquired++
		s.byWorker[w]++
		s.okLats = append(s.okLats, lat)
		s.maxWait = max(s.maxWait, got.Sub(wantSince))
		s.mu.Unlock()

		validUntil := got.Add(lock.Validity())
		var fence int64
		if l.fenced {
			fence = lock.Fence()
			if l.res != nil {
				l.res.Write(l.key, lock.Token(), fence)
			}
		}
		l.section(w)
		end := time.Now()
		for _, k := range l.keysOf(w) {
			l.ledger.Record(Interval{Key: k, Holder: lock.Token(), Fence: fence, Start: got, End: end, ValidUntil: validUntil})
		}
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		err = lock.Release(rctx)
		rcancel()
		if err != nil {
			s.mu.Lock()
			if errors.Is(err, redlock.ErrLockLost) {
				s.releaseLost++
			} else {
				s.releaseErr++
				s.releaseMsg = err.Error()
			}
			s.mu.Unlock()
		}
		wantSince = time.Now()
	}
}

// obtain takes worker w's lock: the key, or w's set.
func (l *load) obtain(ctx context.Context, w int, opts []Opt) (Held, error) {
	if len(l.sets) == 0 {
		return l.c.Obtain(ctx, l.key, l.ttl, opts...)
	}
	return l.c.ObtainMulti(ctx, l.sets[w%len(l.sets)], l.ttl, opts...)
}

// section is worker w's critical section: the lost-update counter of the
// key, or of every key of w's set, read, held for l.hold, written back.
func (l *load) section(w int) {
	if len(l.sets) == 0 {
		l.counter.Increment(l.hold)
		return
	}
	keys := l.keysOf(w)
	cs := make([]*Counter, len(keys))
	for i, k := range keys {
		cs[i] = l.counters[k]
	}
	IncrementAll(cs, l.hold)
}

// lostInSets is the updates lost over the sets' counters.
func (l *load) lostInSets() int64 {
	var n int64
	for _, c := range l.counters {
		n += c.Lost()
	}
	return n
}

// keysOf returns the keys worker w holds.
func (l *load) keysOf(w int) []string {
	if len(l.sets) == 0 {
		return []string{l.key}
	}
	return l.sets[w%len(l.sets)]
}

// report puts the workload's figures on the row.
func (s *loadStats) report(r *row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p50, p99, mx := Quantiles(s.lats)
	r.set("tries", s.tries)
	r.set("acquisitions", s.acquired)
	if s.elapsed > 0 {
		r.set("acq_per_s", float64(s.acquired)/s.elapsed.Seconds())
	}
	r.set("obtain_p50", p50)
	r.set("obtain_p99", p99)
	r.set("obtain_max", mx)
	if s.releaseLost+s.releaseErr > 0 {
		r.set("release_lost", s.releaseLost)
		r.set("release_err", s.releaseErr)
		if s.releaseMsg != "" {
			r.note("a Release error: %s", s.releaseMsg)
		}
	}
	if s.noDetail > 0 {
		r.set("errors_without_detail", s.noDetail)
		r.note("ErrNotObtained without *QuorumError, e.g. %q", s.noDetailMsg)
	}
	// The library's promise: every ErrNotObtained carries a *QuorumError.
	r.must(s.noDetail == 0, "%d ErrNotObtained without a *QuorumError", s.noDetail)
	if s.pastCtx > slack {
		r.note("slowest Obtain: %s", s.worst)
	}
	if len(s.otherErrs) > 0 {
		r.note("other errors: %v", fmt.Sprint(s.otherErrs))
	}
}

// safety puts the ledger's and counter's figures on the row and returns them.
func safety(r *row, l *Ledger, c *Counter, res *FencedResource) LedgerStats {
	st := l.Stats()
	r.set("cs_overlaps", st.CSOverlaps)
	r.set("promised_overlaps", st.PromisedOverlaps)
	if st.Overruns > 0 {
		r.set("overruns", st.Overruns)
	}
	if c != nil {
		r.set("lost_updates", c.Lost())
	}
	if res != nil {
		fs := res.Stats()
		r.set("stale_rejected", fs.StaleRejected)
		r.set("equal_fence_conflicts", fs.EqualConflicts)
		r.set("fence_regressions", st.FenceRegressions)
	}
	return st
}

// mustSafe asserts the MUST safety figures: no overlap of any kind, no lost
// update. When an overlap comes with an overrun (a holder ran past its
// validity because the machine stalled it), the note says so.
func mustSafe(r *row, st LedgerStats, c *Counter) {
	r.t.Helper()
	r.must(st.PromisedOverlaps == 0, "promised_overlaps=%d, want 0", st.PromisedOverlaps)
	r.must(st.CSOverlaps == 0, "cs_overlaps=%d (overruns=%d), want 0", st.CSOverlaps, st.Overruns)
	if c != nil {
		r.must(c.Lost() == 0, "lost_updates=%d, want 0", c.Lost())
	}
}

// untilOverlap returns a context that ends once ledger holds two holders
// of one key at once, on the row of a mutation check that expects that
// ("cs_overlaps="): the check has failed, and the rest of the run would
// only repeat it. On any other row it ends with stop.
func untilOverlap(r *row, ledger *Ledger) (ctx context.Context, stop func()) {
	ctx, stop = context.WithCancel(context.Background())
	if r.Mutant == "" || !strings.Contains(r.sub.expect, "cs_overlaps=") {
		return ctx, stop
	}
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if ledger.Stats().CSOverlaps > 0 {
				r.note("the run stopped at its first overlap: the check failed")
				stop()
				return
			}
		}
	}()
	return ctx, stop
}
