package chaos

import (
	"flag"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// Most of a scenario's time is waiting (a fault's window, a TTL running
// out), so scenarios run beside each other, as the scheduler below admits
// them: scenario tests of the library (admit), and mutation checks
// (TestMutations), mutationsAtOnce at a time. Each starts its own
// servers, proxies and clients. Every entry runs in this one process
// (and its proxies in-process), so what one does delays the others'
// replies, against node timeouts of 50ms under -race on 2 cores. The
// rules:
//
//   - At most one scenario of the library runs at a time: "no goroutine of
//     the lock left" counts every goroutine running the library's code
//     (lockGoroutines), and a mutation check's goroutines run the
//     mutant's, never the library's.
//   - At most two entries that are not idle run at once, one of them a
//     scenario of the library while one waits for its turn, and a third
//     only if it is idle: it spends its run waiting on faults and TTLs
//     (under a tenth of a core).
//   - A mutation check that keeps a core busy (heavy: those needOf names)
//     runs beside no scenario of the library: beside one, healthy
//     masters' replies to the library missed the node timeout (S4 lost
//     its quorum, S13 its first Obtain). So that the scenarios of the
//     library, which run one at a time, are not held up, a mutation check
//     that is heavy or needs the machine to itself starts only once none
//     waits for its turn.
//   - An entry that needs the machine to itself (alone) runs with nothing
//     beside it. Nothing new starts while a scenario of the library waits
//     for the machine; a mutation check takes it when nothing runs. The
//     entries that need it:
//     S1's 64 workers and S7's sweep beside its hot key: beside others
//     their requests miss the node timeout, and a run that makes no
//     progress checks nothing.
//     S24: the margin seen exceeds the margin asked by a few tens of ms,
//     and a busy scheduler delays A's cancel.
//     S15: its goroutine check (goleak) counts every goroutine the run did
//     not start with, another scenario's too.
//     The checks of a mutant that leaks goroutines: another mutant's would
//     pass them.
//     S13's Obtains through 20ms of latency, for that part of its run
//     (own; the reason is there).
type scheduler struct {
	mu      sync.Mutex
	changed *sync.Cond
	running int  // entries running
	busy    int  // entries running that are not idle
	alone   bool // the machine is one entry's
	heavy   int  // heavy mutation checks running
	library bool // a scenario of the library runs
	waiting int  // entries waiting for the machine to themselves
	queued  int  // scenarios of the library waiting for their turn
}

// A need is what an entry needs of the machine.
type need int

const (
	idle  need = iota // mostly waits
	light             // runs beside others
	heavy             // keeps a core busy: a mutation check only
	alone             // runs with nothing beside it
)

var sched = func() *scheduler {
	s := &scheduler{}
	s.changed = sync.NewCond(&s.mu)
	return s
}()

func (s *scheduler) admits(lib bool, n need) bool {
	switch {
	case s.alone:
		return false
	case n == alone:
		return s.running == 0 && (lib || s.queued == 0)
	case s.waiting > 0:
		return false
	case lib && (s.library || s.heavy > 0):
		return false
	case n == heavy && (s.library || s.queued > 0):
		return false
	case n != idle && s.busy == 2:
		return false
	case !lib && n != idle && s.busy == 1 && !s.library && s.queued > 0:
		return false // the other place is a waiting scenario's of the library
	}
	return s.running < 3
}

// start records an admitted entry and returns the function that ends its
// turn. The caller holds s.mu.
func (s *scheduler) start(lib bool, n need) (leave func()) {
	s.running++
	if n != idle {
		s.busy++
	}
	if n == heavy {
		s.heavy++
	}
	s.alone = n == alone
	s.library = s.library || lib
	return func() {
		s.mu.Lock()
		s.running--
		if n != idle {
			s.busy--
		}
		if n == heavy {
			s.heavy--
		}
		s.alone = false
		s.library = s.library && !lib
		s.mu.Unlock()
		s.changed.Broadcast()
	}
}

// enter blocks until a scenario of the library that needs n may run, and
// returns the function that ends its turn.
func (s *scheduler) enter(n need) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queued++
	if n == alone {
		s.waiting++
	}
	for !s.admits(true, n) {
		s.changed.Wait()
	}
	s.queued--
	if n == alone {
		s.waiting--
	}
	return s.start(true, n)
}

// take blocks until one of the mutation checks in queue may run (need
// tells what each needs), takes the first that may out of the queue and
// returns it and the function that ends its turn; ok is false once the
// queue is empty.
func (s *scheduler) take(queue *[]int, need func(int) need) (i int, leave func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(*queue) > 0 {
		for k, i := range *queue {
			if n := need(i); s.admits(false, n) {
				*queue = slices.Delete(*queue, k, k+1)
				return i, s.start(false, n), true
			}
		}
		s.changed.Wait()
	}
	return 0, nil, false
}

// own gives the running scenario of the library the machine to itself
// until release is called: it waits until every entry beside it has
// ended, and nothing new starts meanwhile. One scenario of the library
// runs at a time, so no two wait for each other here.
func (s *scheduler) own() (release func()) {
	s.mu.Lock()
	s.waiting++
	for s.running > 1 {
		s.changed.Wait()
	}
	s.waiting--
	s.alone = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.alone = false
		s.mu.Unlock()
		s.changed.Broadcast()
	}
}

// admit makes t a scenario test of the library that runs when the
// scheduler lets it: it pauses t (t.Parallel) until the tests that run
// one after another have ended, then waits for its turn, which ends once
// t and its cleanups have.
func admit(t *testing.T, n need) {
	t.Parallel()
	t.Cleanup(sched.enter(n))
}

// unlimitParallel lifts go test's -parallel limit unless it was given:
// the scheduler decides what runs at once. Under the default limit
// (GOMAXPROCS), scenario tests waiting for their turn would hold the
// slots, and TestMutations could wait for one until they all had run.
// It must run before the tests do, after flag.Parse.
func unlimitParallel() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(1<<10))
	}
}
