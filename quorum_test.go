package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The quorum: masters down or frozen, masters that refuse the password, and
// masters that are not independent.

// TestMinorityDown: with a minority of masters killed or frozen, Obtain
// and Release succeed at the quorum, without waiting for the silent
// masters' node timeout.
func TestMinorityDown(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			const timeout = 2 * time.Second
			servers, clients, c := cluster(t, 5, redlock.WithNodeTimeout(timeout))
			takeDown(t, how, servers[3:]...)
			start := time.Now()
			l, err := c.Obtain(ctx, "k", time.Minute)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			// Obtain decided at quorum, without waiting for the frozen masters.
			if took >= timeout/2 {
				t.Fatalf("Obtain took %v with a %v node timeout: it waited for the silent masters", took, timeout)
			}
			if got := count(holdersOf(t, clients[:3], "k"), l.Token()); got != 3 {
				t.Fatalf("our token on %d of the 3 live masters", got)
			}
			start = time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took >= timeout/2 {
				t.Fatalf("Release took %v: it waited for the silent masters", took)
			}
		})
	}
}

// TestMajorityDown: with a majority killed or frozen, Obtain fails within
// about its node timeout with a QuorumError that names every master and
// says what each answered (a timeout for the frozen ones).
func TestMajorityDown(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			const timeout = 200 * time.Millisecond
			servers, _, c := cluster(t, 5, redlock.WithNodeTimeout(timeout))
			down := map[string]bool{}
			for _, s := range servers[2:] {
				down[s.Addr()] = true
			}
			takeDown(t, how, servers[2:]...)
			start := time.Now()
			_, err := c.Obtain(ctx, "k", time.Minute)
			took := time.Since(start)
			if !errors.Is(err, redlock.ErrNotObtained) {
				t.Fatalf("Obtain with a majority %s: %v, want ErrNotObtained", how, err)
			}
			if took > 2*timeout {
				t.Fatalf("Obtain took %v with a %v node timeout", took, timeout)
			}
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || qe.Op != "obtain" || qe.Quorum != 3 || len(qe.Nodes) != 5 {
				t.Fatalf("error %v: want a QuorumError for 5 masters", err)
			}
			for _, n := range qe.Nodes {
				if down[n.Addr] && n.Err == nil {
					t.Fatalf("master %s is down but reported no error", n.Addr)
				}
				if !strings.Contains(err.Error(), n.Addr) {
					t.Fatalf("error %q does not name master %s", err, n.Addr)
				}
			}
			if how == "frozen" && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v does not report the timeouts", err)
			}
		})
	}
}

// TestSingleFrozenIsBounded: one frozen master: Obtain and Release return
// at the node timeout, with an error that matches context.DeadlineExceeded
// (the socket's "i/o timeout" on a client that ends reads at the request's
// deadline, as New requires).
func TestSingleFrozenIsBounded(t *testing.T) {
	ctx := context.Background()
	const timeout = 100 * time.Millisecond
	servers, _, c := cluster(t, 1, redlock.WithNodeTimeout(timeout))
	l := obtain(t, c, "k", time.Minute)
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	for _, call := range []func() error{
		func() error { _, err := c.Obtain(ctx, "other", time.Minute); return err },
		func() error { return l.Release(ctx) },
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call on a frozen master: %v, want a timeout", err)
		}
		if took := time.Since(start); took > 3*timeout {
			t.Fatalf("call on a frozen master took %v with a %v node timeout", took, timeout)
		}
	}
}

// TestWrongPasswordNeverGrants: masters that refuse the password
// (WRONGPASS) grant no lock: Obtain fails with ErrUnavailable. go-redis
// leaves a pipeline's commands without an error when it cannot set a
// connection up for a reason the server gave; they must not be read as
// replies.
func TestWrongPasswordNeverGrants(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = clientOf(t, s, func(o *redis.Options) { o.Username, o.Password = "alice", "wrong" })
	}
	for _, n := range []int{1, 3} {
		c, err := redlock.New(clients[:n], redlock.AnyClientOptions())
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

// TestDuplicateMastersRejected: two clients of one server are one master,
// and New refuses them (one restart would take two votes); a Ring is no
// master; another database of one server is the same server, refused too
// (TestNewRefusesTwoDatabasesOfOneServer).
func TestDuplicateMastersRejected(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 2)
	a, b, other := clientOf(t, servers[0], bounded), clientOf(t, servers[0], bounded), clientOf(t, servers[1], bounded)
	db1 := clientOf(t, servers[0], bounded, func(o *redis.Options) { o.DB = 1 })
	if _, err := redlock.New([]redis.UniversalClient{a, other, b}); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with two clients of one server: %v, want ErrInvalidArgument", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": servers[0].Addr()}})
	defer ring.Close()
	if _, err := redlock.New([]redis.UniversalClient{ring}); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with a Ring: %v, want ErrInvalidArgument", err)
	}
	if _, err := redlock.New([]redis.UniversalClient{a, other, db1}); !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "same server") {
		t.Fatalf("New with two databases of one server: %v, want ErrInvalidArgument naming the same server", err)
	}
	c, err := redlock.New([]redis.UniversalClient{a, other})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestDuplicateMastersRejectedWhateverTheSpelling: "localhost:port" and
// "127.0.0.1:port" name one server, and New refuses them as two masters,
// as it refuses two equal addresses: one restart of that server would lose
// two votes of three.
func TestDuplicateMastersRejectedWhateverTheSpelling(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 2)
	a := clientOf(t, servers[0], bounded)
	b := clientOf(t, servers[0], bounded, func(o *redis.Options) { o.Addr = fmt.Sprintf("localhost:%d", servers[0].Port()) })
	other := clientOf(t, servers[1], bounded)
	c, err := redlock.New([]redis.UniversalClient{a, b, other})
	if err == nil {
		c.Close()
		t.Fatalf("New took %s and %s, one server, as two masters", a.Options().Addr, b.Options().Addr)
	}
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatal(err)
	}
}
