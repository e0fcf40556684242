// Command scheduled-job shows a periodic job (a cron entry, a ticker) that
// every replica of a service starts, run by exactly one of them each time.
//
// When to use: every replica schedules the same periodic job and one run per period is wanted ("skip if locked").
//
//	go run ./examples/scheduled-job             # 5 in-process Redis masters, nothing to install
//	go run ./examples/scheduled-job -hold=false # release at once: late replicas run slots again
//	go run ./examples/scheduled-job -masters h1:6379,h2:6379,h3:6379
//
// Each of -replicas goroutines (standing for processes) starts the job
// "report" at every slot, a "minute" compressed to -slot, for -slots slots.
// Replica clocks disagree: each tick lands up to -skew late. At its tick a
// replica calls Client.Do on the lock "job:report:<minute>" without retry;
// the one that obtains it runs the job (-work long), every other one gets
// ErrTaken and skips the slot. The program prints which replica ran
// each slot and how many skipped, and exits 1 unless every slot ran exactly
// once.
//
// The lock is an efficiency lock: it makes a duplicate run rare, not
// impossible (a replica frozen past its lease, a master restarted without
// persistence). If a duplicate run would do harm, make the job idempotent
// or fence what it writes (see examples/fenced-write).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/examples/internal/servers"
)

// config is what the flags set.
type config struct {
	masters  []string      // real Redis masters; none: start 5 miniredis
	replicas int           // processes running the same schedule
	slots    int           // how many periods to run
	slot     time.Duration // one period: a "minute", compressed
	skew     time.Duration // a replica's tick lands in [0, skew) after the slot starts
	work     time.Duration // how long one run of the job takes
	ttl      time.Duration // lock TTL; Do renews it while the lock is held
	hold     bool          // keep the lock until the slot ends (lockAtLeastFor)
}

func main() {
	var cfg config
	var masters string
	flag.StringVar(&masters, "masters", "", "comma-separated `addresses` of real Redis masters (one address: single-instance lock)\n(default: 5 in-process miniredis servers)")
	flag.IntVar(&cfg.replicas, "replicas", 5, "replicas (processes) that all schedule the job")
	flag.IntVar(&cfg.slots, "slots", 10, "how many slots (scheduled runs) to play")
	flag.DurationVar(&cfg.slot, "slot", 200*time.Millisecond, "the schedule's period: a \"minute\", compressed")
	flag.DurationVar(&cfg.skew, "skew", 50*time.Millisecond, "clock skew: each replica's tick lands up to this late; must be below -slot")
	flag.DurationVar(&cfg.work, "work", 40*time.Millisecond, "how long one run of the job takes")
	flag.DurationVar(&cfg.ttl, "ttl", time.Second, "lock TTL; Do renews it every TTL/3 while the lock is held, so it only bounds\nhow long a crashed replica keeps its slot's lock")
	flag.BoolVar(&cfg.hold, "hold", true, "keep the lock until the slot ends, like ShedLock's lockAtLeastFor;\n-hold=false releases it when the job ends, and a late replica may run the slot again")
	flag.Parse()
	if masters != "" {
		cfg.masters = strings.Split(masters, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduled-job:", err)
		os.Exit(1)
	}
}

// run sets up the masters and the lock client, plays every replica's
// schedule, prints the table, and returns an error unless every slot ran
// exactly once. It closes everything it opened.
func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.replicas < 1 || cfg.slots < 1 || cfg.slot <= 0 || cfg.skew < 0 || cfg.skew >= cfg.slot || cfg.work < 0 {
		return errors.New("need -replicas >= 1, -slots >= 1, -slot > 0, 0 <= -skew < -slot and -work >= 0")
	}
	var set servers.Set
	defer set.Close() // deferred first, so it runs after locks.Close
	masters, where, err := set.Masters(ctx, cfg.masters, 5)
	if err != nil {
		return err
	}

	prefix := redlock.WithKeyPrefix("scheduled-job:")
	var locks *redlock.Client
	if len(masters) == 1 {
		locks, err = redlock.NewSingle(masters[0], prefix)
	} else {
		locks, err = redlock.New(masters, prefix)
	}
	if err != nil {
		return err
	}
	defer locks.Close()

	hold := "each run holds its slot's lock until the slot ends"
	if !cfg.hold {
		hold = "each run releases its lock as soon as the job ends"
	}
	fmt.Fprintf(out, "%s; %d replicas schedule the job \"report\" every \"minute\" (compressed to %v) for %d minutes;\n"+
		"ticks land up to %v late (clock skew); a run takes %v; %s.\n\n",
		where, cfg.replicas, cfg.slot, cfg.slots, cfg.skew, cfg.work, hold)

	// The slots stand for the coming minutes: slot i is the minute first+i.
	first := time.Now().Truncate(time.Minute).Add(time.Minute)
	d := &demo{cfg: cfg, locks: locks, start: time.Now(), slots: make([]slot, cfg.slots)}
	for i := range d.slots {
		d.slots[i].minute = first.Add(time.Duration(i) * time.Minute)
	}
	var wg sync.WaitGroup
	errs := make([]error, cfg.replicas)
	for r := range cfg.replicas {
		wg.Go(func() { errs[r] = d.replica(ctx, r+1) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx) // interrupted: the table would mean nothing
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return d.report(out)
}

// demo is the shared state of one run.
type demo struct {
	cfg   config
	locks *redlock.Client
	start time.Time // slot i starts at start + i*cfg.slot

	mu    sync.Mutex // guards slots' runs and skipped
	slots []slot
}

// slot is what happened in one scheduled period.
type slot struct {
	minute  time.Time // the minute the slot stands for: its id
	runs    []jobRun  // should be exactly one
	skipped int       // replicas that did not obtain the slot's lock
}

type jobRun struct {
	replica int
	late    time.Duration // from the slot's start to the run's start
}

// replica is one process's scheduler: at each slot it ticks, a little late
// by its clock's skew, and tries to run the job.
func (d *demo) replica(ctx context.Context, r int) error {
	for i := range d.slots {
		begin := d.start.Add(time.Duration(i) * d.cfg.slot)
		tick := begin
		if d.cfg.skew > 0 {
			tick = tick.Add(rand.N(d.cfg.skew))
		}
		if err := sleep(ctx, time.Until(tick)); err != nil {
			return err
		}
		if err := d.tick(ctx, r, i, begin); err != nil {
			return fmt.Errorf("replica %d, slot %d: %w", r, i+1, err)
		}
	}
	return nil
}

// tick is the pattern this example is about: try the slot's lock once, run
// the job if we got it, skip the slot if another replica has it.
func (d *demo) tick(ctx context.Context, r, i int, begin time.Time) error {
	end := begin.Add(d.cfg.slot)
	// The key names the slot, not just the job. A replica whose clock ticks
	// late can then never mistake this slot's lock for the next one's, and
	// the lock may be held as long as needed (a long run, the hold below)
	// without blocking the next slot. With one key per job, as ShedLock
	// uses, the hold must stay between the worst skew and the period.
	key := "job:report:" + d.slots[i].minute.Format("2006-01-02T15:04")

	// Do releases the lock when the job returns. Released then, the key
	// would be free again while replicas whose clocks run late have yet to
	// tick for this slot, and one of them would run it a second time. So
	// the lock is held at least until the slot ends, as ShedLock's
	// lockAtLeastFor does: the release leaves the key in place until then.
	// The skew must stay below the slot.
	opts := []redlock.ObtainOption{}
	if d.cfg.hold {
		opts = append(opts, redlock.WithHoldAtLeast(time.Until(end)))
	}
	// No retry (the default): waiting for the lock would only run the job
	// again once the winner is done.
	err := d.locks.Do(ctx, key, d.cfg.ttl, func(ctx context.Context) error {
		d.mu.Lock()
		d.slots[i].runs = append(d.slots[i].runs, jobRun{replica: r, late: time.Since(begin)})
		d.mu.Unlock()
		return sleep(ctx, d.cfg.work) // the job itself
	}, opts...)
	if errors.Is(err, redlock.ErrUnavailable) {
		// Too few masters answered: nobody may be running this slot. Say
		// so loudly; here the next tick comes anyway.
		log.Printf("replica %d, slot %d: masters unavailable, slot skipped: %v", r, i+1, err)
	}
	if errors.Is(err, redlock.ErrNotObtained) {
		// Another replica has this slot (ErrTaken), or the outage above:
		// skip it.
		d.mu.Lock()
		d.slots[i].skipped++
		d.mu.Unlock()
		return nil
	}
	return err
}

// report prints one line per slot and says whether each ran exactly once.
func (d *demo) report(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tminute\tran on\tstarted\tskipped")
	var bad []string
	for i, s := range d.slots {
		on, at := "nobody", "-"
		if len(s.runs) > 0 {
			var rs, ls []string
			for _, r := range s.runs {
				rs = append(rs, fmt.Sprintf("replica %d", r.replica))
				ls = append(ls, fmt.Sprintf("+%dms", r.late.Milliseconds()))
			}
			on, at = strings.Join(rs, ", "), strings.Join(ls, ", ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", i+1, s.minute.Format("15:04"), on, at, s.skipped)
		if len(s.runs) != 1 {
			bad = append(bad, fmt.Sprintf("slot %d ran %d times", i+1, len(s.runs)))
		}
	}
	tw.Flush()
	if len(bad) > 0 {
		fmt.Fprintf(out, "\nNOT every slot ran exactly once: %s.\n", strings.Join(bad, ", "))
		return errors.New("not every slot ran exactly once")
	}
	fmt.Fprintf(out, "\nEvery slot ran exactly once.\n")
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx) // nil while ctx is live
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
