// Command fenced-write shows why a lock alone cannot protect a resource, and
// how a fencing token checked by the resource does.
//
// When to use: a write by a holder whose lease lapsed would do harm, so the resource must refuse stale writes itself.
//
//	go run ./examples/fenced-write             # 3 in-process Redis masters, nothing to install
//	go run ./examples/fenced-write -ttl 1s -pause 2s
//	go run ./examples/fenced-write -masters h1:6379,h2:6379,h3:6379 -resource h4:6379
//
// Two workers, A and B, write a report to a shared resource under a lock taken
// WithFencing. A obtains the lock, checks it still holds it, then freezes
// (standing for a GC pause or a stalled VM) for -pause, longer than its -ttl
// lease. Meanwhile the lease lapses, B obtains the lock with a higher fence
// and writes. A wakes up, unaware, and writes too. The story runs twice:
//
//   - with the fence check ([redlock.FencedWrite]): the resource refuses A's
//     stale write, and B's report stays;
//   - without it (a plain SET): A's stale write silently overwrites B's.
//
// The program prints the timeline, the fences and the resource's answers,
// and exits 1 unless the fenced resource refused A's write and kept B's.
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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/examples/internal/servers"
)

// config is what the flags set.
type config struct {
	masters  []string      // real Redis masters for the lock; none: start 3 miniredis
	resource string        // the Redis holding the resource; "": the first master, or another miniredis
	ttl      time.Duration // the lock's lease
	pause    time.Duration // how long A freezes between its check and its write
}

func main() {
	var cfg config
	var masters string
	flag.StringVar(&masters, "masters", "", "comma-separated `addresses` of real Redis masters for the lock (one address: single-instance lock)\n(default: 3 in-process miniredis servers)")
	flag.StringVar(&cfg.resource, "resource", "", "`address` of the Redis that holds the resource\n(default: the first of -masters, or another in-process miniredis)")
	flag.DurationVar(&cfg.ttl, "ttl", 300*time.Millisecond, "the lock's lease (TTL); A and B hold it without renewal")
	flag.DurationVar(&cfg.pause, "pause", 600*time.Millisecond, "how long A freezes between checking its lock and writing; must exceed -ttl")
	flag.Parse()
	if masters != "" {
		cfg.masters = strings.Split(masters, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-write:", err)
		os.Exit(1)
	}
}

// run plays the story with and without the fence check, prints the account,
// and returns an error unless the fenced resource refused A's stale write
// and kept B's. It closes everything it opened.
func run(ctx context.Context, cfg config, out io.Writer) error {
	fenced, plain, err := demo(ctx, cfg, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nWith the fence check:    %s.\n", fenced.verdict())
	fmt.Fprintf(out, "Without the fence check: %s.\n", plain.verdict())
	if err := fenced.check(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nThe lock did not stop A: its lease had lapsed while it was frozen, and it could not know.\n"+
		"Only the resource, comparing fences, could refuse the stale write.")
	return nil
}

// outcome is what happened in one telling of the story.
type outcome struct {
	fenced         bool
	fenceA, fenceB int64
	errA, errB     error  // the resource's answers to A's and B's writes
	final          string // the resource's value at the end
}

// Values the workers write: each names its writer, so the final value says
// whose write survived.
const (
	valueA = "report by A"
	valueB = "report by B"
)

func (o outcome) verdict() string {
	var s string
	switch {
	case o.final == valueB && o.errA != nil:
		s = "B's write kept, A's stale write refused"
	case o.final == valueA && o.errA == nil:
		s = "A's stale write silently overwrote B's: B's report is lost"
	default:
		s = fmt.Sprintf("unexpected: A's write: %v, B's write: %v", o.errA, o.errB)
	}
	return fmt.Sprintf("%s; resource = %q", s, o.final)
}

// check returns an error unless the fenced story went as fencing promises.
func (o outcome) check() error {
	var bad []string
	if o.fenceB <= o.fenceA {
		bad = append(bad, fmt.Sprintf("B's fence %d is not above A's %d", o.fenceB, o.fenceA))
	}
	if o.errB != nil {
		bad = append(bad, fmt.Sprintf("B's write failed: %v", o.errB))
	}
	if !errors.Is(o.errA, redlock.ErrStaleFence) {
		bad = append(bad, fmt.Sprintf("A's stale write was not refused (%v)", o.errA))
	}
	if o.final != valueB {
		bad = append(bad, fmt.Sprintf("the resource holds %q, not B's value", o.final))
	}
	if len(bad) > 0 {
		return errors.New("fencing did not protect the resource: " + strings.Join(bad, "; "))
	}
	return nil
}

// demo sets up the masters, the lock client and the resource, and tells the
// story twice: with the fence check, then without.
func demo(ctx context.Context, cfg config, out io.Writer) (fenced, plain outcome, err error) {
	if cfg.ttl < 10*time.Millisecond || cfg.pause <= cfg.ttl {
		return fenced, plain, errors.New("need -ttl >= 10ms and -pause > -ttl: A must freeze past its lease")
	}
	var set servers.Set
	defer set.Close() // deferred first, so it runs after locks.Close
	masters, where, err := set.Masters(ctx, cfg.masters, 3)
	if err != nil {
		return fenced, plain, err
	}
	// The resource gets a client of its own, even when it shares a server
	// with a master: New rejects the same client twice, not the same server.
	at := cfg.resource
	if at == "" && len(cfg.masters) > 0 {
		at = cfg.masters[0]
	}
	resource, err := set.Add(ctx, at)
	if err != nil {
		return fenced, plain, err
	}

	// WithFencing: every lock carries a fence, a number that grows with each
	// new holder of the key (Lock.Fence).
	opts := []redlock.Option{redlock.WithFencing(), redlock.WithKeyPrefix("fenced-write:lock:")}
	var locks *redlock.Client
	if len(masters) == 1 {
		locks, err = redlock.NewSingle(masters[0], opts...)
	} else {
		locks, err = redlock.New(masters, opts...)
	}
	if err != nil {
		return fenced, plain, err
	}
	defer locks.Close()

	fmt.Fprintf(out, "%s; lease %v; A freezes for %v between its check and its write.\n", where, cfg.ttl, cfg.pause)
	s := &story{cfg: cfg, locks: locks, rdb: resource, out: out}
	if fenced, err = s.play(ctx, true); err != nil {
		return fenced, plain, err
	}
	plain, err = s.play(ctx, false)
	return fenced, plain, err
}

// story is the shared state of the two tellings.
type story struct {
	cfg   config
	locks *redlock.Client
	rdb   *redis.Client // the resource's store
	out   io.Writer

	mu    sync.Mutex // A and B print from their own goroutines
	start time.Time
}

// play runs workers A and B against one resource, with or without the fence
// check, and returns what happened.
func (s *story) play(ctx context.Context, fenced bool) (outcome, error) {
	o := outcome{fenced: fenced}
	name := "report-unfenced"
	if fenced {
		name = "report-fenced"
	}
	key := "fenced-write:" + name // the resource; the lock is named after it
	if err := s.rdb.Del(ctx, key).Err(); err != nil {
		return o, fmt.Errorf("resetting the resource: %w", err)
	}
	if fenced {
		fmt.Fprintf(s.out, "\n== With the fence check: the resource %s accepts a write only if its fence is not below the highest it has seen (redlock.FencedWrite)\n", key)
	} else {
		fmt.Fprintf(s.out, "\n== Without the fence check: the resource %s takes a plain SET\n", key)
	}

	// write is the resource's side. Fenced: an atomic compare-and-set on the
	// fence, kept beside the value. Plain: whoever writes last wins.
	write := func(ctx context.Context, fence int64, value string) error {
		if fenced {
			return redlock.FencedWrite(ctx, s.rdb, key, fence, value)
		}
		return s.rdb.Set(ctx, key, value, 0).Err()
	}

	// Bound the whole telling, so a broken setup cannot hang the program.
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.pause+5*s.cfg.ttl+5*time.Second)
	defer cancel()
	s.start = time.Now()
	aHolds := make(chan struct{}) // B starts once A holds the lock
	bDone := make(chan struct{})  // closed when B has written, or given up
	var wg sync.WaitGroup
	var errA, errB error // setup failures, not the resource's answers
	wg.Go(func() { errA = s.workerA(ctx, name, write, &o, aHolds, bDone) })
	wg.Go(func() { errB = s.workerB(ctx, name, write, &o, aHolds, bDone) })
	wg.Wait()
	if err := errors.Join(errA, errB); err != nil {
		return o, err
	}

	var err error
	if fenced {
		var f int64
		o.final, f, err = redlock.FencedRead(ctx, s.rdb, key)
		s.logf("the resource holds %q, written with fence %d", o.final, f)
	} else {
		o.final, err = s.rdb.Get(ctx, key).Result()
		s.logf("the resource holds %q", o.final)
	}
	return o, err
}

// workerA obtains the lock, checks it, freezes past its lease, then writes
// with its old fence. It holds the lock without a watchdog (Lock.Do): a
// frozen process's watchdog is frozen with it, and a sleep here would not
// stop one.
func (s *story) workerA(ctx context.Context, name string, write func(context.Context, int64, string) error,
	o *outcome, aHolds chan<- struct{}, bDone <-chan struct{}) error {
	lock, err := s.locks.Obtain(ctx, name, s.cfg.ttl, s.retry())
	if err != nil {
		close(aHolds)
		return fmt.Errorf("worker A: %w", err)
	}
	o.fenceA = lock.Fence()
	s.logf("A obtained the lock: fence %d, lease %v", lock.Fence(), s.cfg.ttl)
	close(aHolds)

	// The careful check before writing: the lock is still valid...
	s.logf("A checks its lock: still valid for %v; it starts writing...", lock.Validity().Round(time.Millisecond))
	// ...and then the process freezes before the write reaches the resource.
	s.logf("A freezes (GC pause, stalled VM) for %v", s.cfg.pause)
	if err := sleep(ctx, s.cfg.pause); err != nil {
		return err
	}
	// In production nothing orders A's write after B's; waiting here only
	// makes sure that even a slow machine shows the case a fence is for.
	select {
	case <-bDone:
	case <-ctx.Done():
		return context.Cause(ctx)
	}

	if o.fenced {
		s.logf("A wakes up, unaware its lease lapsed, and writes %q with its fence %d", valueA, o.fenceA)
	} else {
		s.logf("A wakes up, unaware its lease lapsed, and writes %q", valueA)
	}
	o.errA = write(ctx, o.fenceA, valueA)
	var stale *redlock.StaleFenceError
	switch {
	case errors.As(o.errA, &stale):
		s.logf("  REFUSED: %v", stale)
	case o.errA != nil:
		return fmt.Errorf("worker A's write: %w", o.errA)
	case !o.fenced:
		s.logf("  accepted: nothing checked the fence; B's report is overwritten")
	default:
		s.logf("  accepted")
	}

	// Only now does A learn that the lock had lapsed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := lock.Release(rctx); errors.Is(err, redlock.ErrLockLost) {
		s.logf("A releases its lock and only now learns it was lost: %v", redlock.ErrLockLost)
	} else if err != nil {
		s.logf("A could not release its lock: %v", err)
	}
	return nil
}

// workerB waits for the lock, retrying, and writes with its fence as soon
// as A's lease has lapsed.
func (s *story) workerB(ctx context.Context, name string, write func(context.Context, int64, string) error,
	o *outcome, aHolds <-chan struct{}, bDone chan<- struct{}) error {
	defer close(bDone)
	<-aHolds
	lock, err := s.locks.Obtain(ctx, name, s.cfg.ttl, s.retry())
	if err != nil {
		return fmt.Errorf("worker B: %w", err)
	}
	o.fenceB = lock.Fence()
	s.logf("B obtained the lock once A's lease lapsed: fence %d", lock.Fence())
	// The usual shape of fenced work: Lock.Do renews the lock while the
	// work runs, cancels ctx if it is lost, releases it at the end, and
	// the work passes the lock's fence with every write.
	err = lock.Do(ctx, func(ctx context.Context) error {
		if o.fenced {
			s.logf("B writes %q with fence %d", valueB, lock.Fence())
		} else {
			s.logf("B writes %q", valueB)
		}
		if o.errB = write(ctx, lock.Fence(), valueB); o.errB != nil {
			s.logf("  refused: %v", o.errB)
		} else {
			s.logf("  accepted")
		}
		return nil
	})
	if err != nil {
		s.logf("B's lock: %v", err)
	}
	return nil
}

// retry makes Obtain try again about every ttl/10 until it gets the lock
// or the telling's context ends: B waits out A's lease this way (A, alone,
// retries only if a master was slow to answer).
func (s *story) retry() redlock.ObtainOption {
	return redlock.WithRetry(redlock.LinearBackoff(s.cfg.ttl / 10))
}

// logf prints one line of the timeline, stamped with the time since the
// telling started.
func (s *story) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "%+7dms  %s\n", time.Since(s.start).Milliseconds(), fmt.Sprintf(format, args...))
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
