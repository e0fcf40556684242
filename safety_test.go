package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests drive the timing of single requests on real redis-servers: a
// reply after its caller gave up, one direction of one connection delayed,
// a connection replaced mid-stream, Close racing calls, a panicking hook.

// proxied returns, per server, a client whose connections go through a
// Proxy the test controls, with ContextTimeoutEnabled when bounded is set.
func proxied(t *testing.T, servers []*redistest.Server, bounded bool) ([]redis.UniversalClient, []*redistest.Proxy) {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	proxies := make([]*redistest.Proxy, len(servers))
	for i, s := range servers {
		p, err := redistest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c := s.Client(func(o *redis.Options) {
			o.Addr = p.Addr()
			o.ContextTimeoutEnabled = bounded
		})
		t.Cleanup(func() { c.Close() })
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i], proxies[i] = c, p
	}
	return clients, proxies
}

// TestFailedExtendNeverLengthensValidity: a stranger's key lingers on master
// 2, so A's quorum is masters 0 and 1. A shortens its lock to 300ms while
// master 1 is frozen: the Extend reaches master 0 only and fails. A's
// validity must shrink to what a successful Extend would have left it (a
// master never shortens a key, but A may not count on more than it asked
// for), and whenever B obtains the lock, A no longer believes it holds it.
func TestFailedExtendNeverLengthensValidity(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	if err := clients[2].Set(ctx, "k", "stranger", 600*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	lock, err := a.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1])
	const short = 300 * time.Millisecond
	start := time.Now()
	err = lock.Extend(ctx, short)
	if err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend reaching one of three masters: %v, want a failure that is not ErrLockLost", err)
	}
	if v, most := lock.Validity(), short-time.Since(start); v > most {
		t.Fatalf("validity %v after a failed Extend(%v), want at most %v", v, short, most)
	}
	if pttl := clients[0].PTTL(ctx, "k").Val(); pttl < 5*time.Second {
		t.Fatalf("master 0's key was cut to %v: a master never shortens a key", pttl)
	}
	for time.Since(start) < 1500*time.Millisecond {
		if bl, err := b.Obtain(ctx, "k", 10*time.Second); err == nil {
			if v := lock.Validity(); v > 0 {
				t.Fatalf("B holds the lock while A's validity is still %v", v)
			}
			_ = bl.Release(ctx)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lock.Validity() > 0 {
		t.Fatal("A's validity outlived the shorter TTL it asked for")
	}
}

// TestLapsedLockIsNeverRevivedByLateRequests: A's Extend starts with a few
// milliseconds of validity left and its requests reach the masters 100ms
// late. Meanwhile A's keys expire and B obtains and releases the lock. A's
// late requests must not re-take the keys: Extend reports the lock lost,
// and no key of A's is left on any master.
func TestLapsedLockIsNeverRevivedByLateRequests(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, true)
	// Node timeouts far above the delay: only the validity bounds A's Extend.
	a := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	b := newClient(t, direct, redlock.WithNodeTimeout(2*time.Second))
	lock, err := a.Obtain(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for lock.Validity() > 3*time.Millisecond {
		time.Sleep(100 * time.Microsecond)
	}
	for _, p := range proxies {
		p.DelayOpen(100*time.Millisecond, 0)
	}
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, time.Minute) }()
	// B obtains as soon as A's keys expire, and releases at once.
	var bl *redlock.Lock
	for deadline := time.Now().Add(time.Second); bl == nil; {
		if time.Now().After(deadline) {
			t.Fatal("B never obtained the lock after A's keys expired")
		}
		bl, _ = b.Obtain(ctx, "k", time.Minute)
	}
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-extended
	if !errors.Is(err, redlock.ErrLockLost) || lock.Validity() != 0 {
		t.Fatalf("Extend of a lock that lapsed while it was in flight: %v (validity %v), want ErrLockLost", err, lock.Validity())
	}
	time.Sleep(300 * time.Millisecond) // A's late requests have all arrived
	if vs := holdersOf(t, direct, "k"); count(vs, lock.Token()) > 0 {
		t.Fatalf("masters hold %q: A's late Extend revived its lapsed lock", vs)
	}
}

// TestReleaseIsNotUndoneByStraggler: A's key vanished from a master, and
// A's Extend to it goes out on a connection whose bytes are delayed, which
// is then cut mid-stream (the client sees a reset, the server still gets the
// bytes later). The lane replaces the connection and the Release that
// follows goes out first. The straggling Extend must not re-take the key
// after the Release returned.
func TestReleaseIsNotUndoneByStraggler(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	lock, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct[0].Del(ctx, "k").Err(); err != nil { // evicted
		t.Fatal(err)
	}
	proxies[0].DelayOpen(300*time.Millisecond, 0)
	cut := make(chan int, 1)
	go func() {
		time.Sleep(30 * time.Millisecond)
		cut <- proxies[0].CutOpen()
	}()
	_ = lock.Extend(ctx, time.Minute) // its fate does not matter; the Release's does
	if n := <-cut; n == 0 {
		t.Fatal("no connection to cut")
	}
	if err := lock.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // the straggler has arrived
	if v := get(t, direct[0], "k"); v != "" {
		t.Fatalf("the master holds %q after Release returned: a straggling Extend re-took the key", v)
	}
}

// TestCloseAfterInlineRequests: on a single master whose client bounds reads
// by the deadline, requests run on their callers' goroutines; Close racing
// them must still return.
func TestCloseAfterInlineRequests(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	defer rdb.Close()
	for round := range 20 {
		c, err := redlock.NewSingle(rdb)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					l, err := c.Obtain(context.Background(), fmt.Sprint(round, "-", g, "-", i), time.Second)
					if err == nil {
						_ = l.Release(context.Background())
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Close did not return", round)
		}
		wg.Wait()
	}
}

// TestCloseEndsRetryingDo: Close while a Do waits for a held lock ends the
// wait promptly, and Do's error matches ErrClosed.
func TestCloseEndsRetryingDo(t *testing.T) {
	ctx := context.Background()
	_, clients, holder := cluster(t, 3)
	if _, err := holder.Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, clients)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "k", time.Second, func(context.Context) error { return nil },
			redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
	}()
	time.Sleep(100 * time.Millisecond) // Do is waiting
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked by a Do waiting for its lock")
	}
	if err := <-done; !errors.Is(err, redlock.ErrClosed) || !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Do ended by Close: %v, want ErrClosed (and the last attempt's ErrTaken)", err)
	}
}

// TestObtainKeepsItsDeadlineOnAFrozenMaster: a failed attempt's clean-up
// must not hold Obtain past its context, on a single master whose client
// bounds reads by the deadline (where requests may run on the caller's
// goroutine).
func TestObtainKeepsItsDeadlineOnAFrozenMaster(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[0])
	const wait = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err := c.Obtain(ctx, "k", time.Minute)
	took := time.Since(start)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain on a frozen master: %v, want ErrNotObtained and the deadline", err)
	}
	if took > wait+200*time.Millisecond { // the node timeout is 500ms
		t.Fatalf("Obtain with a %v deadline returned after %v", wait, took)
	}
	// Cancellation without a deadline is honoured as promptly.
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(wait, ccancel)
	start = time.Now()
	_, err = c.Obtain(cctx, "k2", time.Minute)
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > wait+200*time.Millisecond {
		t.Fatalf("Obtain cancelled after %v returned after %v: %v", wait, took, err)
	}
}

// panicky is a go-redis hook that panics on the commands while armed.
type panicky struct{ armed atomic.Bool }

func (p *panicky) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *panicky) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if p.armed.Load() {
			panic("hook panics")
		}
		return next(ctx, cmd)
	}
}
func (p *panicky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if p.armed.Load() {
			panic("hook panics")
		}
		return next(ctx, cmds)
	}
}

// TestPanickingHookFailsItsBatchOnly: a go-redis hook that panics while
// the library sends fails those requests with a clear error, on the
// caller's goroutine (inline) and on the lane's worker alike; the lane goes
// on working and Close returns.
func TestPanickingHookFailsItsBatchOnly(t *testing.T) {
	for _, bounded := range []bool{true, false} {
		t.Run(fmt.Sprint("inline=", bounded), func(t *testing.T) {
			servers := redistest.Start(t, 1)
			rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = bounded })
			defer rdb.Close()
			hook := &panicky{}
			rdb.AddHook(hook)
			c, err := redlock.NewSingle(rdb)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			hook.armed.Store(true)
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("Obtain panicked: %v", p)
					}
				}()
				if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
					t.Error("Obtain succeeded through a panicking hook")
				} else if !errors.Is(err, redlock.ErrUnavailable) {
					t.Errorf("Obtain through a panicking hook: %v, want ErrUnavailable", err)
				}
			}()
			hook.armed.Store(false)
			done := make(chan error, 1)
			go func() {
				l, err := c.Obtain(ctx, "k2", time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("after the panic: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the lane is wedged after a panicking hook")
			}
			closed := make(chan struct{})
			go func() { c.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hangs after a panicking hook")
			}
		})
	}
}

// TestWatchdogCancelsOnTimeBehindAnExtend: the watchdog tells the work at
// the validity's end even while the caller's own Extend holds the lock and
// waits on frozen masters.
func TestWatchdogCancelsOnTimeBehindAnExtend(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(4*time.Second))
	const ttl = 900 * time.Millisecond
	l, err := c.Obtain(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[:2]...)
	validUntil := time.Now().Add(l.Validity())
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, ttl) }() // hangs on the frozen masters
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("work context not cancelled")
	}
	if late := time.Since(validUntil); late > 150*time.Millisecond {
		t.Fatalf("work told %v after the validity ended", late)
	}
	if !errors.Is(context.Cause(wctx), redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(wctx))
	}
	<-extended
}

// TestDuplicateMastersRejected: two clients of one server are one master.
func TestDuplicateMastersRejected(t *testing.T) {
	servers := redistest.Start(t, 2)
	a, b, other := servers[0].Client(), servers[0].Client(), servers[1].Client()
	db1 := servers[0].Client(func(o *redis.Options) { o.DB = 1 })
	for _, c := range []*redis.Client{a, b, other, db1} {
		defer c.Close()
	}
	if _, err := redlock.New([]redis.UniversalClient{a, other, b}); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with two clients of one server: %v, want ErrInvalidArgument", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": servers[0].Addr()}})
	defer ring.Close()
	if _, err := redlock.New([]redis.UniversalClient{ring}); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with a Ring: %v, want ErrInvalidArgument", err)
	}
	c, err := redlock.New([]redis.UniversalClient{a, other, db1}) // another database is another keyspace
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestRenewIntervalMustLeaveTimeToRenew: an interval that leaves a renewal
// no time before the validity ends is refused; one that does keeps locks on
// healthy masters.
func TestRenewIntervalMustLeaveTimeToRenew(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	fn := func(context.Context) error { time.Sleep(1500 * time.Millisecond); return nil }
	err := c.Do(ctx, "k", time.Second, fn, redlock.WithRenewEvery(999*time.Millisecond))
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Do with a 999ms renewal of a 1s lock: %v, want ErrInvalidArgument", err)
	}
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Do(ctx, fmt.Sprint("k", i), time.Second, fn, redlock.WithRenewEvery(700*time.Millisecond)); err != nil {
				t.Errorf("Do %d with a 700ms renewal of a 1s lock on healthy masters: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

// TestWrongPasswordNeverGrants: when go-redis cannot set a connection up
// for a reason the server gave (WRONGPASS), it leaves a pipeline's commands
// without an error; read as replies, they granted the lock. Every master
// refusing the password must mean no lock.
func TestWrongPasswordNeverGrants(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		c := s.Client(func(o *redis.Options) { o.Username, o.Password = "alice", "wrong" })
		defer c.Close()
		clients[i] = c
	}
	for _, n := range []int{1, 3} {
		c, err := redlock.New(clients[:n])
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			l, err := c.Obtain(context.Background(), "k", time.Minute)
			if err == nil {
				t.Fatalf("N=%d: obtained a lock (token %s) on masters that refuse the password", n, l.Token())
			}
			if !errors.Is(err, redlock.ErrUnavailable) {
				t.Fatalf("N=%d: %v, want ErrUnavailable", n, err)
			}
		}
		c.Close()
	}
}
