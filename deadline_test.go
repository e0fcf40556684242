package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Every call returns by its context and its node timeout, and its error says
// why: the deadline or the context's own cause.

// TestDeadlineKeepsDetail: Obtain retrying until its deadline reports who
// holds the lock, even when the deadline cuts the last attempt short.
func TestDeadlineKeepsDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	h := obtain(t, c, "k", time.Minute)
	defer h.Release(ctx)
	for i := range 30 {
		dctx, cancel := context.WithTimeout(ctx, time.Duration(100+i)*time.Millisecond)
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(3*time.Millisecond)))
		cancel()
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("try %d: %v: want a QuorumError that says the lock is taken", i, err)
		}
	}
}

// TestWaitEndedByDeadlineWrapsIt: retries ended by the context's deadline
// say so (the deadline or its cause) along with the last attempt's
// ErrTaken, whether the deadline came during an attempt, a wait, or before
// the next attempt could start.
func TestWaitEndedByDeadlineWrapsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	if _, err := newClient(t, clients).Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the request's budget ran out")
	for _, tc := range []struct {
		name  string
		retry time.Duration
	}{
		// The next attempt cannot start before the deadline.
		{"wait longer than the deadline", time.Second},
		// The deadline passes while waiting or attempting.
		{"short waits", 5 * time.Millisecond},
	} {
		dctx, cancel := context.WithDeadlineCause(ctx, time.Now().Add(100*time.Millisecond), cause)
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(tc.retry)))
		cancel()
		if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, cause) {
			t.Errorf("%s: %v, want ErrTaken and the deadline or its cause", tc.name, err)
		}
	}
}

// TestObtainWrapsTheContextsOwnCause: a failed Obtain "also matches the
// context's cause" (ErrNotObtained's doc), the cause of a context made with
// context.WithTimeoutCause too, also when Obtain stops because the next
// attempt could not start before the deadline, or because the deadline
// passed before the context's timer fired.
func TestObtainWrapsTheContextsOwnCause(t *testing.T) {
	t.Parallel()
	_, _, c := cluster(t, 1)
	errShutdown := errors.New("shutting down")
	if _, err := c.Obtain(context.Background(), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, errShutdown)
	defer cancel()
	_, err := c.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(400*time.Millisecond)))
	if !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain of a held lock: %v", err)
	}
	if !errors.Is(err, errShutdown) {
		t.Errorf("Obtain that stopped for its context's deadline: %v; want it to match the context's cause %q", err, errShutdown)
	}
}

// TestCancelledCallWrapsItsCause: a call whose context was cancelled with
// a cause matches that cause, also when the lane dropped its requests (the
// caller gave up before they were sent) and those replies decided the
// round before the context's end was seen. Hundreds of calls: the race is
// a few in a hundred.
func TestCancelledCallWrapsItsCause(t *testing.T) {
	t.Parallel()
	_, _, c := cluster(t, 3)
	l := obtain(t, c, "k", time.Minute)
	errMine := errors.New("shutting down")
	bad := 0
	var last error
	for range 300 {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errMine)
		if err := l.Extend(ctx, time.Minute); !errors.Is(err, errMine) {
			bad, last = bad+1, err
		}
	}
	for i := range 300 { // a Release with a cancelled context goes out in the background
		l := obtain(t, c, fmt.Sprint("r", i), time.Minute)
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errMine)
		if err := l.Release(ctx); !errors.Is(err, errMine) {
			bad, last = bad+1, err
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 600 calls with a cancelled context did not match its cause; the last: %v", bad, last)
	}
}

// TestObtainKeepsItsDeadlineOnAFrozenMaster: a failed attempt's clean-up
// does not hold Obtain past its context (a deadline or a cancellation), on
// a single master whose client bounds reads by the deadline (where
// requests may run on the caller's goroutine).
func TestObtainKeepsItsDeadlineOnAFrozenMaster(t *testing.T) {
	servers := redistest.Start(t, 1)
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
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

// TestInspectReturnsAtItsNodeTimeout: Inspect returns by its node timeout
// and its context with a master frozen (Inspect's doc), also through
// go-redis clients whose reads end at their ReadTimeout only
// (ContextTimeoutEnabled off, go-redis's default: New's doc says calls
// still return at their node timeout). Inspect asks the masters' clients
// directly, not through the lanes; `redlock status` reads through it.
func TestInspectReturnsAtItsNodeTimeout(t *testing.T) {
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	takeDown(t, "frozen", servers[0])
	start := time.Now()
	s, err := c.Inspect(ctx, "k")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 300*time.Millisecond {
		t.Fatalf("Inspect with a 100ms node timeout and a 100ms context returned after %v with one master frozen (its answer: %v)", took.Round(time.Millisecond), s.Masters[0].Err)
	}
}

// TestObtainOnABusyPoolReturnsAtItsNodeTimeout: while the application
// holds every connection of the pool, a single master's Obtain (inline on
// the caller's goroutine, its context without a deadline) returns at about
// its node timeout (New's doc), not at the pool's PoolTimeout: go-redis's
// pool waits for a free connection until ctx.Done or PoolTimeout, so the
// request's context must end at its deadline.
func TestObtainOnABusyPoolReturnsAtItsNodeTimeout(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0], bounded, oneLane, func(o *redis.Options) { o.PoolTimeout = 2 * time.Second })
	c := newSingle(t, rdb, redlock.WithNodeTimeout(200*time.Millisecond))
	warm(t, c) // the lane holds a connection
	// The application pins the rest of the pool, then the one the lane
	// gives back when it sees the pool dry.
	var pinned []*redis.Conn
	defer func() {
		for _, cn := range pinned {
			cn.Close()
		}
	}()
	for range 4 {
		cn := rdb.Conn()
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Fatalf("the application's connection %d: %v", len(pinned), err)
		}
		pinned = append(pinned, cn)
	}
	start := time.Now()
	_, err := c.Obtain(ctx, "k", time.Minute)
	if took := time.Since(start); took > 600*time.Millisecond {
		t.Fatalf("Obtain with a 200ms node timeout on a pool the application holds returned after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestClusterRetriesOutlastTheNodeTimeout: "every request to every master
// is bounded by" the node timeout (README), on a Cluster master with the
// README's settings too (ContextTimeoutEnabled; go-redis's default
// MaxRedirects, 3): go-redis retries a timed-out command with a backoff it
// sleeps until ctx.Done, so the request's context must end at its
// deadline, or every backoff runs in full.
func TestClusterRetriesOutlastTheNodeTimeout(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	cc := clusterClient(t, rc, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newSingle(t, cc, redlock.WithNodeTimeout(100*time.Millisecond))
	warm(t, c)
	takeDown(t, "frozen", rc.Servers[0])
	start := time.Now()
	_, err := c.Obtain(ctx, "k", time.Minute)
	took := time.Since(start)
	if err == nil {
		t.Fatal("obtained on a frozen master")
	}
	if took > 160*time.Millisecond {
		t.Fatalf("Obtain with a 100ms node timeout on a frozen Cluster master returned after %v: %v", took, err)
	}
}

// TestDoReturnsWithItsContext: the caller's context ends while fn runs and
// most masters have stopped answering; fn returns at once, and so does Do,
// not a node timeout later: nothing outlasts the caller's context by more
// than scheduling slack, and the Release that must still go out goes in
// the background.
func TestDoReturnsWithItsContext(t *testing.T) {
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ended time.Time
	err := c.Do(ctx, "k", 10*time.Second, func(wctx context.Context) error {
		takeDown(t, "frozen", servers[0], servers[1])
		cancel()
		ended = time.Now()
		<-wctx.Done()
		return wctx.Err()
	})
	if late := time.Since(ended); late > 200*time.Millisecond {
		t.Fatalf("Do returned %v after its context was cancelled: %v", late.Round(time.Millisecond), err)
	}
}

// TestReleaseHonoursItsContextWhileTheWatchdogRenews: a Release returns by
// its context while the watchdog's renewal, which holds the lock's mutex,
// hangs on slow masters: it does not wait out the renewal's node timeout.
func TestReleaseHonoursItsContextWhileTheWatchdogRenews(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "k", 10*time.Second)
	_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[0], servers[1])
	renewals := scriptsRun(t, clients[2])
	redistest.Eventually(t, func() error { // a renewal reached the live master: it hangs on the frozen majority
		if scriptsRun(t, clients[2]) == renewals {
			return errors.New("no renewal since the freeze")
		}
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Release(rctx)
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("Release with a 50ms context returned after %v: %v", took.Round(time.Millisecond), err)
	}
}
