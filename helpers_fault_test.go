package redlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Helpers of the fault tests: faults (servers frozen, killed, cut,
// delayed), masters' clocks, and the states locks and watchdogs are driven
// into. The other helpers are in helpers_test.go.

// Faults.

// takeDown kills ("killed") or freezes ("frozen", resumed at cleanup) the
// servers.
func takeDown(t *testing.T, how string, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		var err error
		if how == "killed" {
			err = s.Kill()
		} else {
			err = s.Stop()
			t.Cleanup(func() { s.Cont() })
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// resume resumes frozen servers.
func resume(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
}

// writable waits until the master runs writes again: a write waits on it
// while a CLIENT PAUSE WRITE lasts, or while it is frozen.
func writable(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	redistest.Eventually(t, func() error { return rdb.Del(context.Background(), "writable").Err() })
}

// take sets key to another owner's token on the masters given.
func take(t *testing.T, servers []*redistest.Server, key string, masters ...int) {
	t.Helper()
	for _, i := range masters {
		rdb := servers[i].Client()
		err := rdb.Set(context.Background(), key, "other", time.Minute).Err()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// cutReplies delays the replies of every connection open now through p,
// and resets their client side after a moment, while what the client sent
// has already reached the server: the master ran the request, the client
// sees a reset and never gets the reply.
func cutReplies(p *redistest.Proxy) {
	p.DelayOpen(0, 300*time.Millisecond)
	time.AfterFunc(50*time.Millisecond, func() { p.CutOpen() }) // the request is out: the reply is on its way
}

// delivered waits until the proxies hold no byte back: what was sent
// through them (a straggling request, a late reply) has been delivered, or
// dropped with its connection.
func delivered(t *testing.T, proxies ...*redistest.Proxy) {
	t.Helper()
	redistest.Eventually(t, func() error {
		for i, p := range proxies {
			if n := p.Pending(); n > 0 {
				return fmt.Errorf("proxy %d still holds %d chunks back", i, n)
			}
		}
		return nil
	})
}

// landed returns key's value on the master once the master has run what
// was delivered to it before the call (after delivered): the first GET
// ends the event loop turn in which the master reads what had arrived on
// its other connections, the second reads the key after it.
func landed(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	get(t, rdb, key)
	return get(t, rdb, key)
}

// written counts the bytes a go-redis client writes to its connections,
// and its dials (attempts, failed ones too); its dialer is an option of
// clientOf.
type written struct{ n, dials atomic.Int64 }

func (w *written) dialer(o *redis.Options) {
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		w.dials.Add(1)
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{c, &w.n}, nil
	}
}

// past waits until the client has written more than n bytes in all: what
// it sent is in the master's socket, frozen or not.
func (w *written) past(t *testing.T, n int64) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if w.n.Load() <= n {
			return errors.New("nothing written yet")
		}
		return nil
	})
}

type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// stalledLane freezes the master of a Client with one lane while a request
// is in flight on it (its answer is due only after the node timeout): the
// lane is stalled, and refuses what comes next. The master is resumed at
// cleanup.
func stalledLane(t *testing.T, s *redistest.Server, inFlight func()) {
	t.Helper()
	takeDown(t, "frozen", s)
	done := make(chan struct{})
	go func() { defer close(done); inFlight() }()
	t.Cleanup(func() { <-done })
	time.Sleep(150 * time.Millisecond) // the request in flight is past its node timeout (50ms): the lane counts as stalled
}

// Clocks.

// clockShim builds the chaos suite's clock shim (chaos/shim/clockshim.c)
// and returns the environment that runs a redis-server with its wall clock
// offset by offset (CLOCK_REALTIME only: what TIME and key expiry read).
// It skips without a C compiler.
func clockShim(t *testing.T, offset time.Duration) []string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc for the clock shim: %v", err)
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "clockshim.so")
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, filepath.Join("chaos", "shim", "clockshim.c")).CombinedOutput(); err != nil {
		t.Fatalf("building the clock shim: %v: %s", err, out)
	}
	// The control file: seq (even: stable), offset ns, rate ppm, anchor ns.
	ctl := make([]byte, 4096)
	binary.LittleEndian.PutUint64(ctl[0:], 2)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(int64(offset)))
	binary.LittleEndian.PutUint64(ctl[16:], 1_000_000)
	path := filepath.Join(dir, "clock")
	if err := os.WriteFile(path, ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"LD_PRELOAD=" + so, "CLOCKSHIM_FILE=" + path}
}

// setClock moves the wall clock of the redis-server run with env (from
// clockShim) to offset from the real one, at once: a jump.
func setClock(t *testing.T, env []string, offset time.Duration) {
	t.Helper()
	writeClock(t, env, map[int64]uint64{8: uint64(int64(offset))})
}

// setClockRate makes the wall clock of the redis-server run with env
// (from clockShim) run at rate times the real speed from now on, keeping
// its reading now.
func setClockRate(t *testing.T, env []string, rate float64) {
	t.Helper()
	writeClock(t, env, map[int64]uint64{16: uint64(int64(rate * 1e6)), 24: uint64(time.Now().UnixNano())})
}

// writeClock writes fields (offset in the control file: value) of the
// clock shim's control file, under its sequence number.
func writeClock(t *testing.T, env []string, fields map[int64]uint64) {
	t.Helper()
	var path string
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "CLOCKSHIM_FILE="); ok {
			path = p
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // never truncated: the server maps it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	seq := binary.LittleEndian.Uint64(b[:])
	put := func(at int64, v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		if _, err := f.WriteAt(b[:], at); err != nil {
			t.Fatal(err)
		}
	}
	put(0, seq+1) // odd: the reader waits
	for at, v := range fields {
		put(at, v)
	}
	put(0, seq+2)
}

// masterOffset is how far the master's TIME is ahead of the local wall
// clock: the reading of the fastest of five round trips, whose midpoint
// is the surest.
func masterOffset(t *testing.T, rdb redis.UniversalClient) time.Duration {
	t.Helper()
	var best, off time.Duration
	for i := range 5 {
		before := time.Now()
		tm, err := rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(before); i == 0 || rtt < best {
			best, off = rtt, tm.Sub(before.Add(rtt/2))
		}
	}
	return off
}

// pastValidity reports whether err is a master's answer that it ran an
// Extend past the lock's validity end, by its clock.
func pastValidity(err error) bool {
	return err != nil && strings.Contains(err.Error(), "past the lock's validity end")
}

// Locks and watchdogs.

// lapsed waits until l's validity has ended.
func lapsed(t *testing.T, l *redlock.Lock) {
	t.Helper()
	lapsing(t, l, 0)
}

// lapsing waits until l's validity is left or less (polled every 100µs).
func lapsing(t *testing.T, l *redlock.Lock, left time.Duration) {
	t.Helper()
	for l.Validity() > left {
		time.Sleep(100 * time.Microsecond)
	}
}

// extendAgain extends l to ttl, trying again while its validity lasts (a
// lane may hold its batches back until a straggler is stale), until an
// Extend succeeds or says the lock lost.
func extendAgain(t *testing.T, l *redlock.Lock, ttl time.Duration) {
	t.Helper()
	for l.Validity() > 0 {
		if err := l.Extend(context.Background(), ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
			return
		}
		time.Sleep(10 * time.Millisecond) // the next try
	}
}

// noSecondHolder has b try to obtain key until deadline, every 10ms, and
// fails the test if it gets the lock while l's Validity says l still holds
// it: two holders. why explains such a failure.
func noSecondHolder(t *testing.T, b *redlock.Client, l *redlock.Lock, key string, deadline time.Time, why string) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	bl, err := b.Obtain(ctx, key, 10*time.Second, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err != nil {
		t.Logf("B: %v", err)
		return // l's lock held: fine
	}
	defer bl.Release(context.Background())
	if v := l.Validity(); v > 0 {
		t.Fatalf("B obtained the lock while A's Validity() is %v: %s", v.Round(time.Millisecond), why)
	}
}

// overlapAfterRestarts restarts the servers given, without persistence
// (the keys they held are lost), in parallel, and has another Client take
// key and release it: a holder whose key those masters lost overlapped
// with that other holder.
func overlapAfterRestarts(t *testing.T, all []*redistest.Server, key string, restart ...*redistest.Server) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(restart))
	for i, s := range restart {
		wg.Go(func() { errs[i] = s.Restart(false) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	b := newClient(t, redistest.Clients(t, all), redlock.WithNodeTimeout(500*time.Millisecond))
	lb, err := b.Obtain(context.Background(), key, time.Minute) // B holds the lock while A does
	if err != nil {
		t.Fatalf("B's Obtain after the restarts: %v", err)
	}
	if err := lb.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// releaseThroughAFreeze releases l while the servers given are frozen (a
// moment of slowness), which must fail without ErrLockLost, resumes them,
// and returns that first Release's error.
func releaseThroughAFreeze(t *testing.T, l *redlock.Lock, frozen ...*redistest.Server) error {
	t.Helper()
	takeDown(t, "frozen", frozen...)
	first := l.Release(context.Background())
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("A's Release with %d masters frozen: %v, want a failure that is not ErrLockLost", len(frozen), first)
	}
	resume(t, frozen...)
	return first
}

// heldUpExtend holds an Extend of l up in master 0's socket until l's
// validity has ended, after master 0 alone ran the Extend before it, so
// that master 0's key outlives the validity l counts on: masters 1 and 2
// freeze (an Extend reaches master 0 alone and fails; master 0 ran it),
// then master 0 freezes with the next Extend in its socket; once the
// validity has ended, every master resumes, and master 0 has run the
// held-up Extend when heldUpExtend returns. direct0 is a direct client of
// master 0; key one of l's keys; ran when master 0 last ran an Extend
// before it froze.
func heldUpExtend(t *testing.T, l *redlock.Lock, servers []*redistest.Server, direct0 redis.UniversalClient, key string, ttl time.Duration) (ran time.Time) {
	t.Helper()
	ctx := context.Background()
	work(300 * time.Millisecond) // held a while: master 0's renewal will outlive the validity of the Obtain by this much
	takeDown(t, "frozen", servers[1:]...)
	if err := l.Extend(ctx, ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with masters 1 and 2 frozen: %v, want a failure that is not ErrLockLost", err)
	}
	ran = time.Now() // master 0 ran that Extend before now
	if pttl := direct0.PTTL(ctx, key).Val(); pttl < ttl-250*time.Millisecond {
		t.Fatalf("setup: master 0's key has %v left, want the failed Extend's %v", pttl, ttl)
	}
	takeDown(t, "frozen", servers[0])
	if err := l.Extend(ctx, ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with every master frozen: %v, want a failure that is not ErrLockLost", err)
	}
	lapsed(t, l) // master 0 runs the held-up Extend past the validity's end
	resume(t, servers...)
	// Master 0 reads the held-up Extend first, from the socket it was
	// already watching.
	if v := landed(t, direct0, key); v != l.Token() {
		t.Fatalf("setup: master 0 holds %q after it resumed, want the lock's key (the failed Extend's renewal)", v)
	}
	return ran
}

// holdWithWatchdog obtains key for 30s (renewed every 10s) and runs a
// watchdog on it until the test ends; it returns the lock and the
// watchdog's context, whose cause says why the lock can no longer be
// trusted.
func holdWithWatchdog(t *testing.T, c *redlock.Client, key string) (*redlock.Lock, context.Context) {
	t.Helper()
	l := obtain(t, c, key, 30*time.Second)
	wctx, stop, err := l.KeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l, wctx
}

// takeOverAndReset deletes "k" on the master and has b take it, as a
// restart that another Client's acquire reached first leaves it, then
// cuts the master's subscriptions; it returns when it cut them.
func takeOverAndReset(t *testing.T, master redis.UniversalClient, b *redlock.Client) time.Time {
	t.Helper()
	if err := master.Del(t.Context(), "k").Err(); err != nil {
		t.Fatal(err)
	}
	lb := obtain(t, b, "k", 30*time.Second)
	t.Cleanup(func() { lb.Release(context.Background()) })
	reset := time.Now()
	cutSubscriptions(t, master)
	return reset
}

// cutSubscriptions kills the master's subscribed connections.
func cutSubscriptions(t *testing.T, master redis.UniversalClient) {
	t.Helper()
	if err := master.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
}

// toldWithin waits for the watchdog's context, which must end with
// ErrLockLost within bound of reset, not at its next renewal (10s away).
func toldWithin(t *testing.T, wctx context.Context, reset time.Time, bound time.Duration) {
	t.Helper()
	select {
	case <-wctx.Done():
		t.Logf("the work was told %v after the reset", time.Since(reset).Round(time.Millisecond))
		if d := time.Since(reset); d > bound {
			t.Errorf("told %v after the reset, want within %v", d.Round(time.Millisecond), bound)
		}
		if cause := context.Cause(wctx); !errors.Is(cause, redlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("the watchdog did not tell the work within %v of the reset (its next renewal is 10s away)", bound+5*time.Second)
	}
}

// retaken waits, at most within, until the master holds key for token
// again (a watchdog re-took it), and returns how long that took.
func retaken(t *testing.T, master redis.UniversalClient, key, token string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	redistest.Within(t, within, func() error {
		if v := get(t, master, key); v != token {
			return fmt.Errorf("the master holds %q %v on, want the watchdog to have re-taken the key (its next renewal is 10s away)", v, time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
	return time.Since(start)
}
