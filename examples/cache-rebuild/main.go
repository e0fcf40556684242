// Command cache-rebuild shows the commonest use of a distributed lock: many
// replicas of a service find the same cache entries stale at the same moment,
// and only one of them should do the expensive rebuild of each entry.
//
//	go run ./examples/cache-rebuild             # 5 in-process Redis masters, nothing to install
//	go run ./examples/cache-rebuild -wait 1s    # the others wait for the fresh value
//	go run ./examples/cache-rebuild -masters h1:6379,h2:6379,h3:6379
//
// Each of -workers goroutines (standing for replicas) asks for each of
// -entries cache entries at the same moment. A worker that finds an entry
// stale tries the lock "rebuild:<entry>" once. The winner rebuilds the entry
// (-work of simulated effort), writes the new value and releases the lock.
// The others serve the stale value at once or, with -wait D, wait up to D
// for the winner to release its lock (Client.WaitReleased: woken by the
// release, no polling), then read the cache. The program prints a table per
// entry and exits 1 unless every entry was rebuilt exactly once.
//
// The lock is an efficiency lock: it makes duplicate rebuilds rare, not
// impossible. That suits a cache, where a duplicate rebuild only costs time.
// When a duplicate would do harm, the store itself must refuse a stale writer
// (a fencing token, a conditional update): see the package doc.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/examples/internal/servers"
)

// config is what the flags set.
type config struct {
	masters []string      // real Redis masters; none: start 5 miniredis
	workers int           // concurrent workers, standing for replicas
	entries int           // cache entries every worker asks for
	work    time.Duration // how long one rebuild takes
	wait    time.Duration // how long a loser waits for the fresh value; 0: not at all
	ttl     time.Duration // lock TTL: must outlast the rebuild
}

// defaults is the configuration without flags.
func defaults() config {
	return config{workers: 50, entries: 4, work: 200 * time.Millisecond, ttl: 2 * time.Second}
}

func main() {
	cfg := defaults()
	var masters string
	flag.StringVar(&masters, "masters", "", "comma-separated `addresses` of real Redis masters (one address: single-instance lock)\n(default: 5 in-process miniredis servers)")
	flag.IntVar(&cfg.workers, "workers", cfg.workers, "concurrent workers, standing for replicas")
	flag.IntVar(&cfg.entries, "entries", cfg.entries, "stale cache entries every worker asks for")
	flag.DurationVar(&cfg.work, "work", cfg.work, "how long one rebuild takes")
	flag.DurationVar(&cfg.wait, "wait", cfg.wait, "how long a worker without the lock waits for the fresh value (0: serve the stale value at once)")
	flag.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "lock TTL; keep it well above -work")
	flag.Parse()
	if masters != "" {
		cfg.masters = strings.Split(masters, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cache-rebuild:", err)
		os.Exit(1)
	}
}

// run sets up the masters and the lock client, lets every worker ask for
// every entry at once, prints the table, and returns an error unless every
// entry was rebuilt exactly once. It closes everything it opened.
func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.workers < 1 || cfg.entries < 1 || cfg.work < 0 || cfg.wait < 0 {
		return errors.New("need -workers >= 1, -entries >= 1, -work >= 0 and -wait >= 0")
	}
	var set servers.Set
	defer set.Close() // deferred first, so it runs after locks.Close
	masters, where, err := set.Masters(ctx, cfg.masters, 5)
	if err != nil {
		return err
	}

	// The lock client takes and releases every lock, over all the masters.
	// The prefix keeps lock keys apart from anything else in those Redis
	// servers: the lock for entry "product:1" is the key
	// "cache-rebuild:rebuild:product:1".
	opts := []redlock.Option{redlock.WithKeyPrefix("cache-rebuild:")}
	if len(cfg.masters) == 0 {
		opts = append(opts, redlock.WithNodeTimeout(inProcessNodeTimeout(cfg.ttl)))
	}
	locks, err := newClient(masters, opts...)
	if err != nil {
		return err
	}
	defer locks.Close() // waits for the client's goroutines; leaves our redis clients open

	// The workers stand for replicas, and a replica's Release does not
	// queue behind the other replicas' requests: they have Clients of their
	// own. So the waiting workers look at the masters through a Client of
	// their own: one Client's requests to a master go out one batch at a
	// time, and a winner's Release sent on the waiters' Client would wait
	// behind a batch of their looks, one per waiting worker (a script each:
	// microseconds on Redis, about half a millisecond on an in-process
	// miniredis, more on a busy machine), past its node timeout
	// (TestRunIsCleanOnABusyMachine). A look may take as long as a worker
	// is willing to wait: the waiters' node timeout is -wait.
	waits := locks
	if cfg.wait > 0 {
		waits, err = newClient(masters, opts[0], redlock.WithNodeTimeout(max(cfg.wait, inProcessNodeTimeout(cfg.ttl))))
		if err != nil {
			return err
		}
		defer waits.Close()
	}

	d := &demo{cfg: cfg, locks: locks, waits: waits, out: out, cache: cache{entries: map[string]entry{}}, stats: map[string]*stats{}}
	var keys []string
	for i := range cfg.entries {
		key := fmt.Sprintf("product:%d", i+1)
		keys = append(keys, key)
		d.cache.put(key, entry{value: "v1 (stale)"})
		d.stats[key] = &stats{}
	}

	fmt.Fprintf(out, "%s.\n%d workers each ask for %d stale entries at once; a rebuild takes %v; lock TTL %v;\n",
		where, cfg.workers, cfg.entries, cfg.work, cfg.ttl)
	if cfg.wait > 0 {
		fmt.Fprintf(out, "a worker without the lock waits up to %v for the fresh value.\n\n", cfg.wait)
	} else {
		fmt.Fprintf(out, "a worker without the lock serves the stale value at once.\n\n")
	}

	// Start every request together: the thundering herd a lock is for.
	began := time.Now()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var errsMu sync.Mutex
	var errs []error
	for w := range cfg.workers {
		for _, key := range keys {
			wg.Go(func() {
				<-start
				if err := d.serve(ctx, w+1, key); err != nil {
					errsMu.Lock()
					errs = append(errs, fmt.Errorf("worker %d, %s: %w", w+1, key, err))
					errsMu.Unlock()
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx) // interrupted: the table would mean nothing
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return d.report(keys, time.Since(began))
}

// inProcessNodeTimeout is the lock client's node timeout for in-process
// masters: half the TTL. The library's default, a tenth of the TTL, suits
// a Redis across a network; in-process masters share the demo's CPUs, and
// on a busy machine a request waits that long for a CPU to run on
// (TestRunIsCleanOnABusyMachine). Half the TTL still leaves the lock valid
// once obtained, and a master that never answers still costs at most that
// much.
func inProcessNodeTimeout(ttl time.Duration) time.Duration { return ttl / 2 }

// newClient returns a lock client over masters: a single-instance lock
// over one, a quorum lock (len(masters)/2 + 1) over more.
func newClient(masters []redis.UniversalClient, opts ...redlock.Option) (*redlock.Client, error) {
	if len(masters) == 1 {
		return redlock.NewSingle(masters[0], opts...)
	}
	return redlock.New(masters, opts...)
}

// demo is the shared state of one run.
type demo struct {
	cfg   config
	locks *redlock.Client // Obtain and Release
	waits *redlock.Client // WaitReleased
	cache cache
	stats map[string]*stats // one per entry; the map is read-only once workers start

	outMu sync.Mutex // workers print from many goroutines
	out   io.Writer
}

// serve is one worker's request for one entry: the pattern this example is
// about. It returns an error only for what contention cannot explain.
func (d *demo) serve(ctx context.Context, worker int, key string) error {
	st := d.stats[key]
	if d.cache.get(key).fresh {
		st.fresh.Add(1) // someone already rebuilt it: no lock needed
		return nil
	}

	// Try the lock once: most workers lose, and should not queue up for it.
	st.tried.Add(1)
	lock, err := d.locks.Obtain(ctx, "rebuild:"+key, d.cfg.ttl)
	switch {
	case errors.Is(err, redlock.ErrTaken):
		// Another worker holds it: serve what the cache has, at once or
		// after waiting for the winner's value. (ErrUnavailable, too few
		// masters answered, is an outage: it falls to the error below
		// rather than passing for contention.)
		st.once.Do(func() { st.firstErr = err })
		if d.cfg.wait > 0 {
			st.waited.Add(1)
			d.awaitFresh(ctx, key)
		}
		if d.cache.get(key).fresh {
			st.fresh.Add(1)
		} else {
			st.stale.Add(1)
		}
		return nil
	case err != nil:
		return err // masters unavailable, invalid arguments, a closed client: not contention
	}
	defer d.release(ctx, worker, lock)

	// Check again under the lock: another worker may have rebuilt the entry
	// and released its lock since we first looked.
	if d.cache.get(key).fresh {
		st.fresh.Add(1)
		return nil
	}

	// The expensive part: a slow query, a render, a call to another service.
	if err := sleep(ctx, d.cfg.work); err != nil {
		return err
	}

	// Write only while the lock is still ours. If the rebuild outlasted the
	// lock's validity, another worker may now hold it and be rebuilding too.
	// The check narrows that window, it cannot close it: the store would have
	// to check a fencing token for that.
	if lock.Validity() == 0 {
		st.discarded.Add(1)
		d.printf("%s: worker %d's lock lapsed during the rebuild; its new value is discarded\n", key, worker)
		return nil
	}
	d.cache.put(key, entry{value: fmt.Sprintf("v2 (rebuilt by worker %d)", worker), fresh: true})
	st.rebuilt.Add(1)
	return nil
}

// awaitFresh waits, up to -wait, until the worker that holds the entry's
// lock releases it, and so has written the fresh value (or given up).
// WaitReleased is woken by that release; it does not poll the masters or
// the cache.
//
// Obtain could wait for the lock instead (redlock.WithWait), but a waiter
// wants the value, not the lock: taking the lock in turn, 49 times, only to
// read the cache would serialise the readers. If the rebuilder dies, its
// lock expires after the TTL, WaitReleased returns, and the next request
// that finds the entry stale rebuilds it.
func (d *demo) awaitFresh(ctx context.Context, key string) {
	wctx, cancel := context.WithTimeout(ctx, d.cfg.wait)
	defer cancel()
	if err := d.waits.WaitReleased(wctx, "rebuild:"+key); err != nil && wctx.Err() == nil {
		d.printf("%s: waiting for the rebuild: %v\n", key, err)
	}
}

// release gives the lock back as soon as the work is done, so waiting
// workers need not sit out the TTL.
func (d *demo) release(ctx context.Context, worker int, lock *redlock.Lock) {
	// Release even when ctx was cancelled (Ctrl-C): a lock left behind holds
	// everyone else off until its TTL runs out. Past the TTL there is nothing
	// left to release, so the TTL bounds the wait.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ttl)
	defer cancel()
	err := lock.Release(rctx)
	switch {
	case errors.Is(err, redlock.ErrLockLost):
		d.printf("%s: worker %d's lock had lapsed before release; another worker may have rebuilt it too\n", lock.Key(), worker)
	case err != nil:
		d.printf("%s: worker %d could not release its lock (it expires with its TTL): %v\n", lock.Key(), worker, err)
	}
}

// report prints the table and says whether every entry was rebuilt exactly
// once.
func (d *demo) report(keys []string, took time.Duration) error {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "entry\ttried lock\trebuilt\tdiscarded\tserved stale\tserved fresh\twaited\tvalue now")
	var bad []string
	for _, key := range keys {
		st := d.stats[key]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", key, st.tried.Load(), st.rebuilt.Load(),
			st.discarded.Load(), st.stale.Load(), st.fresh.Load(), st.waited.Load(), d.cache.get(key).value)
		if st.rebuilt.Load() != 1 || st.discarded.Load() != 0 {
			why := fmt.Sprintf("%s rebuilt %d times, %d more rebuilds discarded", key, st.rebuilt.Load(), st.discarded.Load())
			if st.rebuilt.Load() == 0 && st.firstErr != nil {
				why += "; a worker was told: " + st.firstErr.Error()
			}
			bad = append(bad, why)
		}
	}
	tw.Flush()
	fmt.Fprintf(d.out, "\n%d requests in %v. ", d.cfg.workers*len(keys), took.Round(time.Millisecond))
	if len(bad) > 0 {
		fmt.Fprintf(d.out, "NOT every entry was rebuilt exactly once:\n  %s\n", strings.Join(bad, "\n  "))
		d.legend()
		return errors.New("not every entry was rebuilt exactly once")
	}
	fmt.Fprintf(d.out, "Every entry was rebuilt exactly once.\n")
	d.legend()
	return nil
}

// legend says what the columns count and where to go next. Every request
// ends in exactly one of rebuilt, discarded, served stale and served fresh.
func (d *demo) legend() {
	fmt.Fprint(d.out, `
tried lock    found the entry stale and tried its lock, once
rebuilt       won the lock, rebuilt the entry and wrote the new value
discarded     won the lock, but it lapsed during the rebuild: value not written
served stale  lost the race and served the old value
served fresh  found the new value (at first, under the lock, or after waiting)
waited        lost the race and waited (-wait) for the winner's release
`)
	fmt.Fprintln(d.out)
	if d.cfg.wait == 0 {
		fmt.Fprintln(d.out, "Try -wait 1s: losers wait for the fresh value (woken by the release, no polling).")
	}
	if len(d.cfg.masters) == 0 {
		fmt.Fprintln(d.out, "Try -masters host:port,...: real Redis masters (one address: a single-instance lock).")
	}
	fmt.Fprintln(d.out, "Read next: README.md, \"Quick start\", then docs/waiting.md.")
}

func (d *demo) printf(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

// stats counts what happened to one entry's requests. Each request ends in
// exactly one of rebuilt, discarded, served stale or served fresh.
type stats struct {
	tried, rebuilt, discarded, stale, fresh, waited atomic.Int64

	once     sync.Once
	firstErr error // the first ErrTaken, shown if nobody rebuilt the entry
}

// cache stands for the shared cache store (Memcached, a Redis used as a
// cache, ...) that every replica reads and writes.
type cache struct {
	mu      sync.Mutex
	entries map[string]entry
}

type entry struct {
	value string
	fresh bool
}

func (c *cache) get(key string) entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[key]
}

func (c *cache) put(key string, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = e
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
