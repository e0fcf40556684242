package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// WithReplicaAcks: a grant counts only once its master's replicas have it.

// TestReplicaAcksGrant: with the replica up, a lock WithReplicaAcks(1) is
// granted, and the replica holds its key when Obtain returns; Extend and
// Release work; a fenced lock too.
func TestReplicaAcksGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, replica, rdb, wc := replicated(t)
	rc := replica.Client()
	defer rc.Close()
	for _, fenced := range []bool{false, true} {
		opts := []redlock.Option{redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait), redlock.AnyClientOptions()}
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		c, err := redlock.NewSingle(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint("k-fenced-", fenced)
		l := obtain(t, c, key, 10*time.Second)
		// Acknowledged: the replica has it already, no waiting.
		if v, err := rc.Get(ctx, key).Result(); err != nil || v != l.Token() {
			t.Fatalf("fenced=%v: the replica holds %q (%v) right after Obtain, want the token", fenced, v, err)
		}
		if err := l.Extend(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if ms, err := rc.PTTL(ctx, key).Result(); err != nil || ms < 15*time.Second {
			t.Fatalf("fenced=%v: the replica's PTTL %v (%v) right after Extend(20s)", fenced, ms, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if waits, _, _ := wc.get(); waits < 4 {
		t.Fatalf("%d WAITs for two acquires and two Extends", waits)
	}
}

// TestReplicaAcksFrozenReplica: with the replica frozen, Obtain fails with
// ErrNotObtained and ErrUnavailable (not ErrTaken), says that 0 of 1
// replicas acknowledged, and leaves no key on the master (the undo). An
// Extend whose write is not acknowledged fails as an Extend that got no
// answer: ErrUnavailable, not ErrLockLost, the validity shortened, never
// lengthened.
func TestReplicaAcksFrozenReplica(t *testing.T) {
	ctx := context.Background()
	_, replica, rdb, _ := replicated(t)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait))
	held := obtain(t, c, "extended", 10*time.Second)
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	defer replica.Cont()

	start := time.Now()
	_, err := c.Obtain(ctx, "k", 10*time.Second)
	took := time.Since(start)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain with the replica frozen: %v", err)
	}
	var re *redlock.ReplicaError
	if !errors.As(err, &re) || re.Acked != 0 || re.Want != 1 || re.Timeout != ackWait {
		t.Fatalf("Obtain with the replica frozen: %v, want a ReplicaError 0 of 1 within %v", err, ackWait)
	}
	if !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Fatalf("the error does not say how many acknowledged: %v", err)
	}
	// The master waits ackWait for the replica; the attempt and its undo
	// each take a node timeout at most.
	if took < ackWait || took > 2*ackNodeTimeout {
		t.Fatalf("Obtain took %v: the master waits %v for the replica, then the undo", took, ackWait)
	}
	// The undo is waited for: the master answered, it is alive.
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("the master holds the key of a failed Obtain: %d (%v)", n, err)
	}

	before := held.Validity()
	start = time.Now()
	err = held.Extend(ctx, time.Second)
	if !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrLockLost) || !errors.As(err, &re) || re.Acked != 0 {
		t.Fatalf("Extend with the replica frozen: %v, want ErrUnavailable with a ReplicaError, not ErrLockLost", err)
	}
	// A failed Extend shortens the validity to at most ttl - drift from its
	// start (the master did run it), and never lengthens it.
	v := held.Validity()
	if limit := time.Second - time.Since(start); v > limit || v > before || v == 0 {
		t.Fatalf("validity after the failed Extend %v (before %v), want in (0, %v]", v, before, limit)
	}
	if err := replica.Cont(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { return held.Extend(ctx, 10*time.Second) })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaAcksWaitFitsTheDeadline: a WAIT is cut to end before the
// request's deadline, with room for Redis's late answer (its cron tick,
// 100ms): with the replica frozen and a caller's deadline
// shorter than the acknowledgement timeout, Obtain fails by that deadline
// with a ReplicaError (the count arrived), and the lane keeps its
// connection (a read past the deadline would have broken it, and the next
// connection would have killed it first).
func TestReplicaAcksWaitFitsTheDeadline(t *testing.T) {
	ctx := context.Background()
	_, replica, rdb, wc := replicated(t)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(time.Second), redlock.WithReplicaAcks(1, 800*time.Millisecond))
	l := obtain(t, c, "warm", 10*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	defer replica.Cont()
	const deadline = 400 * time.Millisecond
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_, err := c.Obtain(dctx, "k", 10*time.Second)
	took := time.Since(start)
	var re *redlock.ReplicaError
	if !errors.As(err, &re) || re.Err != nil || re.Timeout > deadline-deadline/8-100*time.Millisecond {
		t.Fatalf("Obtain under a %v deadline, the replica frozen: %v, want a ReplicaError with a count, its WAIT shorter than the deadline", deadline, err)
	}
	if took > deadline+100*time.Millisecond {
		t.Fatalf("Obtain took %v under a %v deadline", took, deadline)
	}
	if err := replica.Cont(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		l, err := c.Obtain(ctx, "after", 10*time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	})
	if _, _, kills := wc.get(); kills != 0 {
		t.Fatalf("%d connections given up and killed: a WAIT outlived its deadline", kills)
	}
}

// TestReplicaAcksRenewals: the watchdog's renewals wait for the replicas
// too: with the replica frozen while Do runs, the renewals fail, and fn's
// context ends with ErrLockLost once the validity runs out.
func TestReplicaAcksRenewals(t *testing.T) {
	ctx := context.Background()
	_, replica, rdb, _ := replicated(t)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithReplicaAcks(1, 20*time.Millisecond))
	const ttl = 600 * time.Millisecond
	var lostAfter time.Duration
	err := c.Do(ctx, "do", ttl, func(ctx context.Context) error {
		if err := replica.Stop(); err != nil {
			return err
		}
		stopped := time.Now()
		<-ctx.Done()
		lostAfter = time.Since(stopped)
		return context.Cause(ctx)
	})
	replica.Cont()
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do with the replica frozen: %v, want ErrLockLost", err)
	}
	if lostAfter > ttl+200*time.Millisecond { // a busy machine's slack
		t.Fatalf("fn's context ended %v after the replica froze, want within the TTL %v", lostAfter, ttl)
	}
}

// TestReplicaAcksEachMaster: over several masters each grant counts only
// with its own master's replicas: with a replica on 2 of 3 masters, a lock
// is granted by those 2 (the third answers 0 of 1), and freezing one of
// the replicas leaves 1 grant, no quorum.
func TestReplicaAcksEachMaster(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	r0 := redistest.StartReplica(t, servers[0])
	redistest.StartReplica(t, servers[1])
	c := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait))
	l := obtain(t, c, "k", 10*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r0.Stop(); err != nil {
		t.Fatal(err)
	}
	defer r0.Cont()
	_, err := c.Obtain(ctx, "k", 10*time.Second)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrUnavailable) || !errors.As(err, &qe) {
		t.Fatalf("Obtain with 1 of 3 masters acknowledged: %v", err)
	}
	for i, want := range []bool{true, false, true} {
		var re *redlock.ReplicaError
		if got := errors.As(qe.Nodes[i].Err, &re); got != want {
			t.Fatalf("master %d: %v, want a ReplicaError: %v", i, qe.Nodes[i].Err, want)
		}
	}
	for i, s := range servers {
		if n, err := redistest.Clients(t, []*redistest.Server{s})[0].Exists(ctx, "k").Result(); err != nil || n != 0 {
			t.Fatalf("master %d holds the key of a failed Obtain: %d (%v)", i, n, err)
		}
	}
}

// TestReplicaAcksShareOneWait: concurrent locks share WAITs: one per
// pipeline with grants, at its end (the hook fails the test otherwise).
func TestReplicaAcksShareOneWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, rdb, wc := replicated(t)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(ackNodeTimeout), redlock.WithReplicaAcks(1, ackWait))
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			l, err := c.Obtain(ctx, fmt.Sprint("k", i), 10*time.Second)
			if err == nil {
				err = l.Release(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waits, cmds, _ := wc.get()
	t.Logf("%d WAITs for %d acquires (%d commands)", waits, n, cmds)
	if waits == 0 || waits > n {
		t.Fatalf("%d WAITs for %d acquires", waits, n)
	}
}

// TestReplicaAcksCostNothingWithout: a Client without the option sends no
// WAIT: what it sends is what it would send were there no replicas.
func TestReplicaAcksCostNothingWithout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, rdb, wc := replicated(t)
	c := newClient(t, []redis.UniversalClient{rdb})
	for i := range 20 {
		l := obtain(t, c, fmt.Sprint("k", i), 10*time.Second)
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if waits, _, _ := wc.get(); waits != 0 {
		t.Fatalf("%d WAITs without WithReplicaAcks", waits)
	}
}

// TestReplicaAcksInvalid: the option's limits, and the masters it cannot
// serve.
func TestReplicaAcksInvalid(t *testing.T) {
	t.Parallel()
	m := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer m.Close()
	for _, opts := range [][]redlock.Option{
		{redlock.WithReplicaAcks(0, ackWait)},
		{redlock.WithReplicaAcks(1, 0)},
		{redlock.WithReplicaAcks(1, 100*time.Millisecond), redlock.WithNodeTimeout(100 * time.Millisecond)},
	} {
		if _, err := redlock.NewSingle(m, opts...); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("NewSingle(%v): %v, want ErrInvalidArgument", opts, err)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer cc.Close()
	if _, err := redlock.NewSingle(cc, redlock.WithReplicaAcks(1, ackWait)); !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "Cluster") {
		t.Fatalf("a Cluster master: %v, want ErrInvalidArgument naming the Cluster", err)
	}
	// The default node timeout is ttl/10: 10ms for a 100ms TTL, shorter
	// than the acknowledgement timeout.
	c, err := redlock.NewSingle(m, redlock.WithReplicaAcks(1, ackWait))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Obtain(context.Background(), "k", 100*time.Millisecond); !errors.Is(err, redlock.ErrInvalidArgument) || errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("an acknowledgement timeout past the default node timeout: %v, want ErrInvalidArgument", err)
	}
}
