package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Close: it ends what the Client runs, waits for it, and every call after
// it says ErrClosed.

// TestClosedClient: after Close, Obtain says ErrClosed, and Close again
// returns nil.
func TestClosedClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 1)
	warm(t, c)
	c.Close()
	if _, err := c.Obtain(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Obtain after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestObtainAfterCloseHasAnOutcome: every failed Obtain matches
// ErrNotObtained and exactly one outcome (ErrNotObtained's doc; the
// README's quick start branches on it); an Obtain on a closed Client has
// the outcome ErrClosed, and is not an outage (ErrUnavailable).
func TestObtainAfterCloseHasAnOutcome(t *testing.T) {
	t.Parallel()
	_, clients, _ := cluster(t, 1)
	c, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = c.Obtain(context.Background(), "k", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrClosed) || errors.Is(err, redlock.ErrTaken) || errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain on a closed Client: %v; want ErrNotObtained and ErrClosed, neither ErrTaken nor ErrUnavailable (not an outage)", err)
	}
}

// TestCloseReturnsWhileAMasterIsFrozen: Close waits for every lane's batch
// in flight, whose read is bounded by the go-redis client's ReadTimeout
// unless ContextTimeoutEnabled is set. New refuses a client with no read
// timeout (with it, Close would block while a master stays frozen), and
// with one Close returns while a master is frozen.
func TestCloseReturnsWhileAMasterIsFrozen(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, len(servers))
	for _, rt := range []time.Duration{-1, -2} {
		rdb := clientOf(t, servers[0], func(o *redis.Options) { o.ReadTimeout = rt })
		if _, err := redlock.New([]redis.UniversalClient{rdb}); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("New with ReadTimeout %d: %v, want ErrInvalidArgument", rt, err)
		}
	}
	// Close waits for the frozen master's reads, each bounded by the read
	// timeout (two of them, measured); the bound is three: a Close that
	// waits for one more read fails.
	const readTimeout = time.Second
	for i, s := range servers {
		clients[i] = pinged(t, s, func(o *redis.Options) { o.ReadTimeout = readTimeout })
	}
	c, err := redlock.New(clients, redlock.WithNodeTimeout(50*time.Millisecond), redlock.AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[0])
	l, err := c.Obtain(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatalf("Obtain with one of three masters frozen: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(3 * readTimeout):
		servers[0].Cont() // let Close finish, so the test can end
		<-closed
		t.Fatalf("Close did not return within %v (three read timeouts) while one master of three was frozen", 3*readTimeout)
	}
}

// TestSecondCloseWaitsToo: Close "returns when every goroutine of the
// client has ended", a Close called while another is still running too: it
// does not return while a Do of the Client still runs. Two owners of a
// Client (a defer and a shutdown hook) race like this.
func TestSecondCloseWaitsToo(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	var running atomic.Bool
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "k", time.Minute, func(ctx context.Context) error {
			running.Store(true)
			defer running.Store(false)
			close(started)
			<-ctx.Done()
			work(300 * time.Millisecond) // the work winds down, while the second Close runs
			return nil
		})
	}()
	<-started
	go c.Close()
	redistest.Eventually(t, func() error { // the first Close has begun: a call now says ErrClosed
		if _, err := c.Obtain(ctx, "probe", time.Minute); !errors.Is(err, redlock.ErrClosed) {
			return fmt.Errorf("Obtain during Close: %v", err)
		}
		return nil
	})
	c.Close()
	stillRunning := running.Load()
	<-done
	if stillRunning {
		t.Fatal("the second Close returned while a Do of the client was still running")
	}
}

// TestCloseAfterInlineRequests: on a single master whose client bounds reads
// by the deadline, requests run on their callers' goroutines; Close racing
// them must still return.
func TestCloseAfterInlineRequests(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0], bounded)
	for round := range 20 {
		c, err := redlock.NewSingle(rdb)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var calls atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					l, err := c.Obtain(context.Background(), fmt.Sprint(round, "-", g, "-", i), time.Second)
					if err == nil {
						_ = l.Release(context.Background())
					}
					calls.Add(1)
				}
			}()
		}
		for calls.Load() < int64(round%5)*16 { // Close comes at varying points of the requests
			runtime.Gosched()
		}
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
	t.Parallel()
	ctx := context.Background()
	_, clients, holder := cluster(t, 3)
	obtain(t, holder, "k", time.Minute)
	c := newClient(t, clients)
	done := make(chan error, 1)
	// Close comes once an attempt was refused, while Do waits to retry:
	// not while an attempt is on its way, which Close ends without its
	// answers (a refusal then is not known).
	refused := &refusedThenWait{refused: make(chan struct{})}
	go func() {
		done <- c.Do(ctx, "k", time.Second, func(context.Context) error { return nil }, redlock.WithRetry(refused))
	}()
	select {
	case <-refused.refused:
	case <-time.After(5 * time.Second):
		t.Fatal("Do's first attempt was not refused")
	}
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

// TestCloseDuringDo: Close ends a running Do's work context with ErrClosed,
// and returns once fn has returned and the lock is released; Do says
// ErrClosed, and so does a Do after Close.
func TestCloseDuringDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	c, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var cause error
	var doErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		doErr = c.Do(ctx, "job", time.Second, func(wctx context.Context) error {
			close(started)
			<-wctx.Done()
			cause = context.Cause(wctx)
			return wctx.Err()
		})
	})
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned: fn has returned and the lock is released.
	if !errors.Is(cause, redlock.ErrClosed) {
		t.Fatalf("work context's cause %v, want ErrClosed", cause)
	}
	if vs := holdersOf(t, clients, "job"); count(vs, "") < 2 {
		t.Fatalf("lock still held on a quorum after Close: %q", vs)
	}
	wg.Wait()
	if !errors.Is(doErr, redlock.ErrClosed) {
		t.Fatalf("Do returned %v, want ErrClosed", doErr)
	}
	if err := c.Do(ctx, "job", time.Second, func(context.Context) error { return nil }); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

// TestDoSaysLostWhenTheValidityEndedAfterClose: Close during Do stops the
// renewals and cancels fn's context (ErrClosed); an fn that goes on past
// the lock's validity (mid-write, or deaf to its context) worked while the
// lock may have been another holder's, and Do's error matches ErrLockLost
// ("when the lock was lost while fn ran, or Release found it lost"), not
// ErrClosed alone.
func TestDoSaysLostWhenTheValidityEndedAfterClose(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	lock := obtain(t, c, "k", 600*time.Millisecond)
	closed := make(chan struct{})
	err := lock.Do(ctx, func(ctx context.Context) error {
		go func() {
			defer close(closed)
			c.Close() // waits for Do
		}()
		<-ctx.Done()
		lapsed(t, lock) // the work goes on past the validity
		return nil
	})
	<-closed
	if !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do whose fn ran past the validity after Close: %v, want it to match ErrLockLost too", err)
	}
}

// TestCloseRacesStartingWatchdogs: Close while watchdogs start (the first
// makes the Client's waker, and its subscription) leaves no goroutine
// (goleak in TestMain) and panics nowhere.
func TestCloseRacesStartingWatchdogs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, 1)[0]
	rdb := clientOf(t, srv)
	ctx := t.Context()
	for i := range 40 {
		c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond), redlock.AnyClientOptions())
		if err != nil {
			t.Fatal(err)
		}
		var locks []*redlock.Lock
		for j := range 4 {
			l := obtain(t, c, fmt.Sprint("k", i, "-", j), time.Minute)
			locks = append(locks, l)
		}
		done := make(chan struct{})
		for _, l := range locks {
			go func() {
				defer func() { done <- struct{}{} }()
				if _, stop, err := l.KeepAlive(ctx); err == nil {
					yield(i % 5) // stop comes at varying points of the start
					stop()
				}
			}()
		}
		yield(i % 3) // and Close too
		c.Close()
		for range locks {
			<-done
		}
	}
}

// refusedThenWait is a RetryStrategy that closes refused when an attempt
// has failed, and then waits a minute before the next.
type refusedThenWait struct {
	once    sync.Once
	refused chan struct{}
}

func (r *refusedThenWait) NextWait(int, error) (time.Duration, bool) {
	r.once.Do(func() { close(r.refused) })
	return time.Minute, true
}
